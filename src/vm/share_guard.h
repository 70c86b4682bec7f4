// The share guard (issue 38): QEMU creates no entry in a shared folder itself. A seccomp filter
// the jail installs on QEMU before exec (vm/qemu_jail.h) turns each of its system calls that makes
// a name (mkdirat, mknodat, symlinkat, linkat, renameat/renameat2, openat/open with O_CREAT,
// creat, mkdir, mknod, symlink, link, rename) into a user notification; the supervisor, holding
// the listener, reads the name once from QEMU's memory, applies vm/share_policy.h, and makes the
// call itself with that copy, in the directory QEMU named by fd, under QEMU's own uid, handing an
// opened file back with SECCOMP_ADDFD_FLAG_SEND. Nothing is "continued": QEMU cannot change the
// name between the check and the use (the kernel warns that a continued notification is no
// security check), so the rule holds even against a compromised QEMU.
//
// The directory must be on one of the mounts the jail made for the shares (the share's own clone,
// its pins and read-only binds, what lies below them), learnt from QEMU's mount table at start:
// the supervisor runs without QEMU's Landlock domain, so this is what keeps the guard from making
// or opening anything QEMU could not. Only single-component names are served; AT_FDCWD, absolute
// paths and the calls without a directory fd are refused (QEMU's 9p server never makes them).
// Opens always add O_NOFOLLOW. The paths host git's configuration names (hook directories,
// include targets, scripts) are refused too, where they are missing and on the way to them
// (vm/share_protect.h).
//
// The same filter refuses (EPERM, in the kernel) setting the set-user-ID bit anywhere (chmod,
// fchmod, fchmodat, fchmodat2), and notifies set-group-ID so that only a directory gets it: a
// file the guest made set-user-ID would belong on the host to the folder's owner, root's folders
// included. O_CREAT/mknod modes with either bit are refused by the guard. io_uring (whose
// operations no seccomp filter sees) and openat2 (its flags are behind a pointer) answer ENOSYS;
// x32 system calls too. Any other architecture is killed.
//
// Fail closed: if the supervisor or its guard thread dies, the listener closes and every notified
// call fails (ENOSYS); if the guard cannot start, the caller kills QEMU.
//
// SECURITY: every name and mode comes from QEMU, i.e. from the guest: bounded reads (4096 bytes),
// one copy, checked, then used.
#pragma once

#include <linux/filter.h>
#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "base/result.h"

namespace cloister::vm {

// The seccomp program (x86-64) the jail installs with SECCOMP_FILTER_FLAG_NEW_LISTENER.
std::vector<sock_filter> ShareGuardFilter();

struct ShareGuardConfig {
  pid_t qemu = -1;
  // Per share (in the order the jail sent their fds): the git dirs the jail pinned, relative to
  // the share ("" = the share itself).
  std::vector<std::vector<std::string>> git_dirs;
  // Per share (same order, or shorter): paths relative to the share that host git's
  // configuration names (vm/share_git_config.h): no name on the way to one is made but by mkdir,
  // and none at its end (vm/share_protect.h).
  std::vector<std::vector<std::string>> protected_paths;
  // The uid/gid QEMU runs under when the supervisor is root (the guard thread drops to it for
  // good); nullopt: the supervisor already is QEMU's uid.
  std::optional<uid_t> uid;
  std::optional<gid_t> gid;
};

// Receives the listener and the shares' directory fds (as QEMU sees them) from `sock` (the jail's
// end, sent by QEMU's child before exec; waits up to 60 s), learns the share mounts, and serves
// the notifications on a thread of its own until QEMU exits. Takes `sock`.
Status StartShareGuard(int sock, const ShareGuardConfig& config);

}  // namespace cloister::vm
