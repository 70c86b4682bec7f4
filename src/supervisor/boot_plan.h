// A boot as a pure plan (issue 14 ask 3). PlanBoot turns what the supervisor gathered for one boot
// (the workspace's config, its live disks and kernel files, the egress proxy's guest view, the
// boot's options) into the metadata disk's config, QEMU's spec without its fds, and the ordered
// list of files QEMU gets as fds. It does no I/O (no file, no environment, no clock), so every
// rule of a boot is a table test (boot_plan_test.cc). LaunchQemu (supervisor/qemu_launch.h) then
// does the I/O: builds the metadata disk, opens the fds, makes the listeners and spawns QEMU.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "base/result.h"
#include "store/config.h"
#include "store/store.h"
#include "supervisor/egress.h"
#include "supervisor/state.h"
#include "supervisor/workspace.h"
#include "vm/accel.h"
#include "vm/meta_disk.h"
#include "vm/qemu_args.h"

namespace cloister::vm {

struct BootInputs {
  std::string workspace;
  std::string boot_id;  // NewBootId(), drawn by the caller
  bool resume = false;  // from run/suspend.state
  // A resumed guest still has the metadata disk it booted with mounted: the plan keeps that image
  // when it is there (the caller checks whether paths.meta_disk is readable).
  bool meta_disk_present = false;
  Accel accel = Accel::kTcg;
  bool sandbox = true;
  std::string tcg_cpu;       // CLOISTER_TCG_CPU ("" = kTcgCpuModel)
  // CLOISTER_TCG_TB_SIZE (MiB; "" = kTcgTbSizeMib, 0 = QEMU's default) and
  // CLOISTER_FREE_PAGE_REPORTING ("0" = no balloon): the benches' other sides. A malformed value
  // refuses the boot.
  std::string tcg_tb_size;
  std::string free_page_reporting;
  // CLOISTER_DISK_AIO (threads|io_uring|native), CLOISTER_DISK_CACHE (writeback|none),
  // CLOISTER_DISK_IOTHREAD (0|1): bench/disk_bench's sides; "" = the defaults.
  std::string disk_aio, disk_cache, disk_iothread;
  std::string npm_registry;  // CLOISTER_GUEST_NPM_REGISTRY ("" = npm's default)
  WorkspaceConfig config;
  LiveDisks disks;
  KernelFiles kernel;
  GuestSetup guest;  // Egress::guest(): placeholders, proxy settings, the CA certificate
  RunPaths paths;
};

// One file QEMU gets as an fd, in the order LaunchQemu opens them (fd set numbers follow it).
struct BootFd {
  enum class Slot { kSystemDisk, kHomeDisk, kMetaDisk, kKernel, kInitrd, kShare, kConsoleLog };
  enum class How {
    kFdSet,     // QemuFds::AddToFdSet -> "/dev/fdset/N"
    kProcPath,  // QemuFds::AddProcPath -> "/proc/self/fd/N"
  };
  Slot slot;
  How how;
  std::string path;  // host path
  int flags = 0;     // open(2) flags
  // kSystemDisk/kHomeDisk: the format ("raw"/"qcow2"); every layer of the disk's backing chain
  // (read by ReadBackingChain within BootPlan::backing_dirs/backing_files) is passed read-only
  // first, then the top read-write.
  std::string format;
  // kProcPath: copy the file into a memfd when QEMU runs under a dropped uid that could not read it
  // (kernel, initramfs).
  bool copy_if_uid_dropped = false;
  size_t share = 0;  // kShare: index into BootPlan::spec.shares
};

struct BootPlan {
  MetaConfig meta;
  std::string meta_disk;        // where the metadata disk image is (run/meta.img)
  bool build_meta_disk = true;  // false: a resumed guest keeps the image it booted with
  // Every field but the fd-backed ones (disks, meta_disk, kernel, initrd, console_log, the
  // shares' host_path, fd_sets, the listen fds), which LaunchQemu fills from `fds`. The shares'
  // host_path holds the host folder until then.
  VmSpec spec;
  std::vector<BootFd> fds;
  // The only places a disk's backing chain may lead (qemu_access.h): the workspace's directory and
  // its base image.
  std::vector<std::string> backing_dirs;
  std::vector<std::string> backing_files;
  bool truncate_console_log = true;  // a fresh log per boot; a resumed VM continues its boot's log
};

// SECURITY: the guest's metadata gets only the egress proxy's guest view (placeholders, proxy
// settings, the CA certificate), the tool's settings and the share tags; an unknown tool or a
// malformed npm registry refuses the boot.
Result<BootPlan> PlanBoot(const BootInputs& in);

}  // namespace cloister::vm
