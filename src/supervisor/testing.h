// The shared fixture of VM tests that drive the real `cloister` binary under TCG with the test image
// (tests only; library cloister_vm_testing). Each test gets its own temporary store; TearDown stops
// every VM it started, whatever failed.
#pragma once

#include <sys/types.h>

#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "base/subprocess.h"
#include "store/config.h"
#include "store/store.h"

namespace cloister::vm::testing {

// Waits (bounded) until `pred` holds, polling every 100 ms. Returns whether it held in time.
template <typename Pred>
bool WaitFor(Pred pred, std::chrono::seconds limit) {
  auto deadline = std::chrono::steady_clock::now() + limit;
  while (!pred()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // polling a condition, bounded
  }
  return true;
}

// Reads a whole file ("" when it cannot be read).
std::string Slurp(const std::string& path);

// Occurrences of `needle` (non-empty) in the file at `path`, read in bounded chunks (any size);
// only its data extents when the needle has no NUL byte (holes read as zeros).
size_t CountInFile(const std::string& path, const std::string& needle);

struct WorkspaceSpec {
  uint32_t memory_mib = 384;
  uint32_t cpus = 1;
  uint64_t home_size = 256ull << 20;  // small: raw scans under TCG read every byte
  std::vector<Volume> volumes;
  // The base image's disk: empty means the shared test image (image_dir()); tests that install
  // large things in the guest pass image::testing::SharedTestImageWithDisk(...)->dir + "/disk.raw".
  std::string image;
};

class CliVmTest : public ::testing::Test {
 protected:
  // Builds (once per build tree) or reuses the shared test image.
  static void SetUpTestSuite();
  void SetUp() override;
  void TearDown() override;

  // The test image's directory (disk.raw, vmlinuz, initrd.img).
  static const std::string& image_dir();

  // Runs `cloister --store ROOT ARGS...` with `input` on stdin and env_ added to its environment
  // (6 minute limit); a non-zero exit is echoed to stderr with the command.
  RunOutput Cloister(std::vector<std::string> args, const std::string& input = "");
  // Starts `cloister --store ROOT ARGS...` in the background, stdio on /dev/null; returns its pid.
  pid_t SpawnCloister(std::vector<std::string> args);
  // The same on a new pseudo-terminal (TERM=xterm, `rows` x `cols`) in `cwd` ("" = ours) with
  // `extra` added to the environment after env_: returns its pid (-1 on failure) and sets
  // *master to the terminal's master side (the caller reads, writes and closes it).
  pid_t SpawnCloisterOnPty(std::vector<std::string> args, int* master, const std::string& cwd = "",
                           const std::map<std::string, std::string>& extra = {},
                           unsigned short rows = 30, unsigned short cols = 100);

  // Creates a workspace from the test image through the store.
  void Create(const std::string& name, const WorkspaceSpec& spec = {});
  // `cloister start NAME --accel tcg`: asserts success and that readiness was reported.
  void Start(const std::string& name);
  // `cloister stop NAME --timeout 60`: asserts success and the derived state is stopped.
  void Stop(const std::string& name);
  // `cloister exec NAME -u USER -- sh -c SCRIPT ARGS...`; returns stdout, sets *code.
  std::string Exec(const std::string& name, const std::string& script, int* code = nullptr,
                   const std::string& user = "dev", const std::vector<std::string>& args = {});

  // Occurrences of `needle` in every regular file under the workspace's directory (its disk
  // layers, metadata disk, logs, config, trace, checkpoints), by path; files without one are left
  // out. This reads the guest's disks as the host stores them (run `sync` in the guest first):
  // far faster than reading /dev/vd* inside a TCG guest.
  std::map<std::string, size_t> FindInWorkspaceFiles(const std::string& name,
                                                     const std::string& needle);

  std::string root_;  // the store root (short, under /tmp: unix socket paths are limited)
  std::string exe_;   // $CLOISTER_BINARY_DIR/src/cli/cloister
  std::unique_ptr<Store> store_;
  std::map<std::string, std::string> env_;  // added to every cloister child's environment

 private:
  // In a forked child: env_, then `extra`, then `cwd`; execs cloister with `args` (never returns).
  [[noreturn]] void ExecCloister(std::vector<std::string> args, const std::string& cwd,
                                 const std::map<std::string, std::string>& extra);
};

}  // namespace cloister::vm::testing
