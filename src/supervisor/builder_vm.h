// The image builder VM (issue 41; image/oci/build_plan.h): one throwaway VM per image build from
// an OCI source, in which every byte of the image and every command of the repo is handled.
//
// Who owns what: RunBuilderVm owns, for its call only, a directory `<store>/tmp/builder-XXXXXX/`
// (0700: the owner lock, a qcow2 overlay of the builder image with a larger virtual size, the
// metadata disk, the console log, the sockets, the proxy's trace), the QEMU process, its channel
// and an egress proxy of its own. It returns only after QEMU is reaped and the directory is
// deleted, whatever happened; a directory left by a crash (owner lock free) is deleted by the next
// build (CollectStaleBuilderDirs). The output disk is the caller's: a raw file attached as vdb,
// written by the VM (the image's disk), which the caller hashes.
//
// SECURITY: the builder VM runs the image's code (a Dockerfile's RUN, a feature's install.sh,
// layers unpacked by umoci). Its channel offers two services, `proxy` and `egress`, served by a
// proxy of its own that holds no credential (a secrets file that does not exist) and traces to
// the directory; any other stream it opens is refused. The host pushes the inputs in as tar
// streams it writes (transfer/tar.h WriteTar: symlinks stored, never followed) to the VM's `tar`
// as root, runs the build command, and reads its output as bytes for the caller's bounded parser
// (image/oci/build_output.h). Nothing from the VM is unpacked, parsed as a filesystem or executed
// on the host. QEMU runs under the builder's reserved uid (store/mac.h kBuilderQemuId), never a
// workspace's.
#pragma once

#include <chrono>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"
#include "vm/accel.h"

namespace cloister::vm {

inline constexpr char kBuilderDirPrefix[] = "builder-";
inline constexpr char kBuilderTraceSource[] = "builder";

struct BuilderInput {
  std::string host_path;  // a file or a directory tree (symlinks stored as symlinks)
  std::string dir;        // the VM's directory it lands in (made first)
  std::string name;       // its name there (no '/')
};

// Stops a build from another thread (a signal's watcher): Cancel() kills the builder's QEMU when
// one runs (the build then fails and is torn down as on any failure) and makes a build that has
// not booted yet refuse to.
class BuilderCancel {
 public:
  void Cancel();
  bool cancelled() const;
  // RunBuilderVm's: what Cancel does while its QEMU runs (null: none runs).
  void SetKill(std::function<void()> kill);

 private:
  mutable std::mutex mu_;
  bool cancelled_ = false;
  std::function<void()> kill_;
};

struct BuilderVmOptions {
  std::string store_root;
  std::string image_disk;   // the builder image's disk.raw (vmlinuz and initrd.img beside it)
  std::string output_disk;  // a raw file, attached as vdb read-write
  std::vector<BuilderInput> inputs;
  std::vector<std::string> command;  // run as root once the inputs are in
  // Every byte the command writes (stdout and stderr), as it comes. SECURITY: hostile.
  std::function<void(std::string_view)> on_output;
  std::function<void(const std::string&)> progress;  // "builder: booting (tcg)"...
  uint64_t system_bytes = 64ull << 30;  // the overlay's virtual size (the builder's work space)
  Accel accel = Accel::kTcg;
  bool sandbox = true;
  int cpus = 2;
  int memory_mib = 2048;
  std::chrono::seconds ready_timeout{600};
  std::string output_path;  // QEMU's stdout/stderr; "" = the directory's qemu.log
  BuilderCancel* cancel = nullptr;  // optional: interrupts the build (kCancelled)
};

// Boots the builder VM, pushes the inputs, runs the command, tears everything down. Returns the
// command's exit code (shell convention), or an error when the VM did not boot or a push failed
// (with the console's tail in the log given to `progress`).
Result<int> RunBuilderVm(const BuilderVmOptions& options);

// Deletes `<store>/tmp/builder-*` directories whose owner lock is free (their build is gone).
std::vector<std::string> CollectStaleBuilderDirs(const std::string& store_root);

}  // namespace cloister::vm
