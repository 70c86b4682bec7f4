// What the VM benches share (memory_bench, suspend_bench, disk_bench, vm_boot_bench, tcg_cpu_bench,
// browser_bench): finding the binaries they drive by themselves, a throwaway store, the `cloister`
// verbs as subprocesses, and reading QEMU's memory from /proc. Benchmarks only; nothing here is a
// test.
#pragma once

#include <sys/types.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/subprocess.h"
#include "store/store.h"

namespace cloister::bench {

// The `cloister` binary beside this bench's build tree (BUILD/bench/X -> BUILD/src/cli/cloister),
// or $CLOISTER_EXE. Sets CLOISTER_EXE and CLOISTER_BINARY_DIR so the supervisor finds it, its
// guest agent and the audit helper too. "" when it is not there.
std::string FindCloister();
// The build tree's shared test image (BUILD/test-cache/image-test), or "" if not built.
std::string DefaultTestImageDir();
// The default image (debian-12) of the user's store (DefaultStoreRoot), or "" if none.
std::string DefaultFullImageDir();

// A throwaway store under /tmp (removed on destruction, its VMs forced off).
class BenchStore {
 public:
  static std::unique_ptr<BenchStore> Make();
  ~BenchStore();
  const std::string& root() const { return root_; }
  Store& store() { return *store_; }
  // `cloister --store ROOT ARGS` with `env` added; stdout/stderr captured, 15 minute limit.
  RunOutput Cli(const std::vector<std::string>& args,
                const std::map<std::string, std::string>& env = {}, const std::string& input = "");
  // `cloister create NAME --image IMAGE_DIR/disk.raw --memory MIB --cpus N`; false on failure
  // (printed).
  bool Create(const std::string& name, const std::string& image_dir, int memory_mib, int cpus = 2);
  // `exec NAME -u USER -- sh -c SCRIPT`; stdout, *code set (-1 on a failed exec).
  std::string Exec(const std::string& name, const std::string& script, int* code = nullptr,
                   const std::string& user = "root");
  // QEMU's pid from the supervisor's status, or -1.
  pid_t QemuPid(const std::string& name);
  void ForceStop(const std::string& name);

 private:
  std::string root_;
  std::unique_ptr<Store> store_;
  std::vector<std::string> names_;
};

// A "Field:  N kB" value of /proc/PID/status or smaps_rollup in KiB, or -1.
long ProcKib(pid_t pid, const std::string& file, const std::string& field);
// The guest's `free -m` used and buff/cache columns (MiB), from `free -m` output; false if absent.
bool ParseFree(const std::string& free_out, long* used, long* cache);
// `uptime`'s load averages, for the figures' context.
std::string LoadAverage();

}  // namespace cloister::bench
