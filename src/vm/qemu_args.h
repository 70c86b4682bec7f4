// The QEMU command line for one workspace boot. Pure function of a VmSpec: unit-tested, no I/O.
//
// Device contract (docs/design.md "Contracts between host and guest"): q35, direct kernel boot,
// vda = system disk, vdb = home, vdc = per-boot metadata disk (read-only), virtio-rng, one virtio-net
// NIC with the workspace MAC on restricted user networking (no route out, no forwards), the channel
// on virtio-serial port org.cloister.channel.0, QMP and the channel on unix sockets, the serial
// console appended to a log file, no display, no default devices, and QEMU's seccomp sandbox.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "protocol/contract.h"
#include "vm/accel.h"

namespace cloister::vm {

using protocol::kChannelPortName;  // the host-guest contract (protocol/contract.h)
// QMP node names of the disks (the store's live checkpoints address them by these names).
inline constexpr char kSystemNode[] = "system";
inline constexpr char kHomeNode[] = "home";
inline constexpr char kMetaNode[] = "meta";

struct DiskSpec {
  std::string path;
  std::string format = "qcow2";  // "qcow2" or "raw"
  // The layers under `path`, top-down (path's backing first), each opened read-only. Set: QEMU
  // gets the whole chain as explicit -blockdev nodes (NODE-l0 is the top's backing) and never
  // opens a backing file named in a qcow2 header; nullopt: QEMU follows the headers itself.
  std::optional<std::vector<DiskSpec>> backing;
};

// An inherited fd QEMU should put in an fd set (`-add-fd`): a path "/dev/fdset/SET" then names it.
struct FdSetEntry {
  int fd = -1;
  int set = 0;
};

struct ShareSpec {
  std::string host_path;  // an existing host directory; never modified by cloister itself
  std::string tag;        // 9p mount tag, [A-Za-z0-9_-]{1,31}
  bool readonly = false;
};

// The CPU model under TCG: everything TCG emulates ("max") but the fast-string hints ERMS and
// FSRM. With them, the guest kernel's user copies and glibc's large memcpy use `rep movsb`, which
// TCG executes one byte per iteration; without them they move 8 bytes at a time or use vector
// loops. bench/tcg_cpu_bench measures both models side by side. KVM keeps `-cpu host`.
inline constexpr char kTcgCpuModel[] = "max,erms=off,fsrm=off";

// TCG's translation cache (MiB) instead of QEMU's 1 GiB default, which a busy guest fills on top
// of its RAM and QEMU never gives back. bench/memory_bench compares 64, 256 and 1024 side by side
// (docs/design.md "Density figures": 219 MiB less idle RSS at 256; the guest-speed difference was
// within the noise of a host at load 20+, so the lead's rerun on a quiet host decides).
inline constexpr int kTcgTbSizeMib = 256;

// The QOM path and id of the balloon device (`qom-get PATH free-page-reporting` reads it back).
inline constexpr char kBalloonId[] = "balloon0";
inline constexpr char kBalloonQomPath[] = "/machine/peripheral/balloon0";

struct VmSpec {
  std::string qemu_binary = "qemu-system-x86_64";
  std::string name;  // workspace name, for -name and the kernel hostname hint
  Accel accel = Accel::kTcg;
  int cpus = 2;
  int memory_mib = 2048;
  std::string kernel;
  std::string initrd;
  std::string extra_cmdline;  // appended after the fixed root=/dev/vda rw console=ttyS0
  DiskSpec system_disk;
  DiskSpec home_disk;
  std::string meta_disk;  // raw ext4, attached read-only
  std::string mac;        // 52:54:00:xx:xx:xx
  std::string channel_socket;
  std::string qmp_socket;
  // Listening sockets the caller made and passes to QEMU (then the paths above are unused by
  // QEMU): an unprivileged QEMU need not create anything in the run directory.
  int channel_listen_fd = -1;
  int qmp_listen_fd = -1;
  std::vector<FdSetEntry> fd_sets;
  std::string console_log;
  std::vector<ShareSpec> shares;
  bool incoming_defer = false;  // resume from a suspend state (migrate-incoming over QMP)
  // -S: the CPUs wait for QMP `cont` (the browser VM's profile disk is attached before its boot).
  bool start_paused = false;
  // The id of a `pcie-root-port` to add ("" = none): q35's root bus takes no hotplug, so a disk
  // added over QMP (browser/profile_disk.h AttachProfile) goes behind it. [a-z0-9-], ≤ 32.
  std::string hotplug_root_port;
  bool sandbox = true;          // -sandbox on,... (QEMU's seccomp filter)
  // -cpu under TCG ([A-Za-z0-9_.,=+-], at most 128 characters); the supervisor takes
  // CLOISTER_TCG_CPU when set (benchmarks compare models with it).
  std::string tcg_cpu = kTcgCpuModel;
  // TCG's translation cache in MiB (`-accel tcg,tb-size=N`; 0 = QEMU's default, 1 GiB on a
  // 64-bit host, which a busy guest fills and QEMU never gives back). The supervisor takes
  // CLOISTER_TCG_TB_SIZE when set; bench/memory_bench measures sizes against guest speed and RSS.
  int tcg_tb_size_mib = kTcgTbSizeMib;
  // A virtio-balloon with free page reporting (`-device virtio-balloon-pci,free-page-reporting=on`):
  // the guest's kernel reports pages it freed (in 2 MiB runs) and QEMU discards them, so guest
  // RAM once touched goes back to the host. The balloon is never inflated (no size target).
  bool free_page_reporting = true;
  // The system and home disks' I/O (bench/disk_bench compares them): QEMU's aio engine
  // ("threads", "io_uring" or "native"; native needs cache_direct), O_DIRECT on the image files
  // (cache=none), and an iothread per disk. The supervisor takes CLOISTER_DISK_AIO,
  // CLOISTER_DISK_CACHE (writeback|none) and CLOISTER_DISK_IOTHREAD (0|1).
  std::string disk_aio = "threads";
  bool disk_cache_direct = false;
  bool disk_iothread = false;
};

// Validates the spec (required paths present, MAC and share tags well-formed, no NUL) and returns
// argv with argv[0] = qemu_binary. Paths are escaped for QEMU's option syntax (',' doubled).
Result<std::vector<std::string>> BuildQemuArgv(const VmSpec& spec);

// The kernel command line BuildQemuArgv passes with -append.
std::string KernelCmdline(const VmSpec& spec);

// Doubles commas so a value can sit inside a QEMU "key=value,key=value" option.
std::string QemuOptEscape(const std::string& value);

}  // namespace cloister::vm
