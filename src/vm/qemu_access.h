// What QEMU may touch on the host, and as whom (issue 7 hardening).
//
// QEMU opens no file by path. The supervisor opens every file QEMU needs (disk layers, metadata
// disk, console log, kernel, initramfs, shared folders) and creates the QMP and channel listening
// sockets itself, then passes the fds: disks and the console through fd sets (`-add-fd`,
// "/dev/fdset/N"), the kernel, initramfs and shared folders as "/proc/self/fd/N", the sockets as
// `-chardev socket,fd=N`. The backing chain of each disk is spelled out as explicit -blockdev nodes
// (read-only), so QEMU never follows a backing file name from a qcow2 header; the supervisor reads
// those names itself and accepts only files inside the workspace directory or the workspace's base
// image (SECURITY: a compromised QEMU can rewrite its top layer's header; the next boot must not
// hand it another workspace's disk or a host file). Checkpoint overlays added at run time go the
// same way (QMP add-fd, then blockdev-add of "/dev/fdset/N").
//
// When the CLI runs as root, QEMU runs as an unprivileged uid of its own per workspace, with
// QEMU's seccomp sandbox on: the supervisor forks it, and the jail (vm/qemu_jail.h) drops it to
// that uid/gid (no supplementary groups, except `kvm` with --accel kvm) before exec, inside a user
// namespace where that uid is the guest user's, so nothing of QEMU ever runs as root (QEMU's own
// -runas is refused by `elevateprivileges=deny`). The uid is kQemuIdBase + the workspace's
// QEMU id, allocated unique within the store by the MAC registry (store/mac.h, Store::QemuId;
// usually the MAC's low 24 bits); it needs no account. Since QEMU holds only the fds
// it was given, the store and the workspace directory stay root-only (0700); what that uid can
// reach on its own is what the world can, except in its shares, where it is the folder's owner
// (an idmapped mount, vm/qemu_jail.h).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "base/result.h"
#include "vm/qemu_args.h"

namespace cloister::vm {

inline constexpr uint32_t kQemuIdBase = 0x5C000000;  // 1543503872

struct QemuIdentity {
  bool drop = false;  // false: QEMU runs as the caller (a non-root CLI)
  uid_t uid = 0;
  gid_t gid = 0;
  std::vector<gid_t> groups;  // supplementary groups (kvm for --accel kvm)
};

// The identity QEMU runs under for a workspace with this MAC. Root: kQemuIdBase + MAC's low 24
// bits (refused if that uid is a real account); not root: no change.
Result<QemuIdentity> QemuIdentityFor(const std::string& mac, bool kvm);
// The same for a QEMU id from the store's registry (Store::QemuId, below 2^24).
Result<QemuIdentity> QemuIdentityForId(uint32_t qemu_id, bool kvm);

// The layers under `top` (top-down: top's backing first), read from each qcow2 header in turn with
// `qemu-img info` (never --backing-chain: nothing unvalidated is opened), each layer's format from
// its parent's header (never probed). Every layer must resolve to a file under one of
// `allowed_dirs` or to one of `allowed_files`; at most 256 layers.
Result<std::vector<DiskSpec>> ReadBackingChain(const std::string& top, const std::string& format,
                                               const std::vector<std::string>& allowed_dirs,
                                               const std::vector<std::string>& allowed_files);

// The fds one QEMU process inherits. Closes every fd it holds on destruction (after the spawn the
// child has its copies).
class QemuFds {
 public:
  QemuFds() = default;
  QemuFds(const QemuFds&) = delete;
  QemuFds& operator=(const QemuFds&) = delete;
  ~QemuFds();

  // Opens `path` (flags: O_RDONLY, O_RDWR, or O_WRONLY|O_APPEND) into a new fd set and returns
  // "/dev/fdset/N". A read-write file also gets a read-only fd in its set (QEMU may reopen a layer
  // read-only).
  Result<std::string> AddToFdSet(const std::string& path, int flags);
  // Opens `path` read-only (a directory with O_DIRECTORY) and returns "/proc/self/fd/N". With
  // `copy_unless_world_readable`, a regular file the unprivileged QEMU could not read is copied
  // into a memfd first (kernel, initramfs).
  Result<std::string> AddProcPath(const std::string& path, int flags,
                                  bool copy_unless_world_readable);
  // Takes ownership of a listening socket QEMU inherits.
  int AddListener(int fd);

  // Closes our copies (call once QEMU has been spawned with its own).
  void CloseAll();

  const std::vector<int>& fds() const { return fds_; }
  const std::vector<FdSetEntry>& fd_sets() const { return sets_; }

 private:
  Result<int> Open(const std::string& path, int flags);
  std::vector<int> fds_;
  std::vector<FdSetEntry> sets_;
  int next_set_ = 1;
};

}  // namespace cloister::vm
