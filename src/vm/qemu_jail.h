// Where QEMU runs (issue 15 items 2 and 5): a private mount namespace whose view of each shared
// folder has the files host git executes from read-only, and a Landlock ruleset under which QEMU
// can open no file by path but what it needs to exist (its program and libraries under /usr, a few
// /dev nodes) and the objects it was handed as fds (shares, kernel, initramfs).
//
// Shape: the supervisor builds a QemuJail before it forks QEMU (Prepare: every check, every
// string, every missing mount target created, the Landlock ruleset filled), then the forked child
// calls Enter() before exec (vm/process.h SpawnOptions::before_exec). Enter() makes only raw
// system calls (no allocation: the supervisor is multithreaded).
//
// In the child, Enter():
//  - a non-root caller: unshare(CLONE_NEWUSER | CLONE_NEWNS), the guest user's uid/gid (1000,
//    protocol/contract.h) mapped to the caller's: QEMU still runs as the user on the host, without
//    capabilities after exec, and 9p shows the user's files to the guest as its own user's, while
//    what the guest creates is the user's (issue 38). Root: unshare(CLONE_NEWNS), and at the end
//    QEMU enters a user namespace Prepare made in which uid/gid 1000 is QEMU's own uid
//    (vm/qemu_access.h), and drops to it there. Every mount becomes a slave: nothing done here
//    reaches the host's mount table.
//  - every share becomes a mount of its own (a recursive bind of the folder onto itself): a
//    read-only share read-only throughout (the kernel enforces what QEMU's readonly=on only asks
//    for); as root, idmapped (vm/userns.h) so that the folder's owner and group are QEMU's uid and
//    gid there: the guest's user acts as the folder's owner and what it makes belongs to that
//    owner, never to QEMU's uid. A read-write share on a filesystem that cannot be idmapped is
//    refused (a read-only one is served unmapped).
//  - a read-write share: every git dir in it is pinned, and what host git executes from is made
//    read-only (vm/share_scan.h). Guest git still commits, branches, fetches and pushes (objects,
//    refs, logs, index, HEAD, packed-refs are writable); it cannot change config (`git config`,
//    `git remote add`), add a submodule or a worktree of the shared repo: do those on the host.
//  - every target is resolved below the share with openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)
//    and must have the type Prepare saw: a symlink or a swap the guest planted fails the boot.
//  - the fd QEMU is told to use for each share (/proc/self/fd/N) is reopened inside the namespace,
//    so QEMU's 9p root is the namespace's view (an fd opened outside would see none of the binds).
//  - empty tmpfs over /tmp, /var/tmp, /run and /dev/shm: no path to an agent or daemon socket.
//  - with a read-write share, the share guard's seccomp filter (vm/share_guard.h); its listener
//    and the shares' fds go to the supervisor over a socketpair (StartGuard), which then makes
//    every entry QEMU creates in a share: no `.git` or other git dir can appear there.
//  - Landlock (PR_SET_NO_NEW_PRIVS, then landlock_restrict_self) with every access right the
//    kernel knows handled, abstract unix sockets and signals scoped to QEMU's own domain.
//
// SECURITY: everything inside a share is written by the guest; Prepare and Enter never follow a
// symlink in it and refuse what they did not expect. Nothing here reads file contents.
//
// Fail closed: a non-root caller needs unprivileged user namespaces, Landlock and seccomp user
// notifications with SECCOMP_ADDFD_FLAG_SEND (Linux 5.14) (refused with the figures and a hint
// otherwise); as root the namespaces and the guard always apply and Landlock is added where the
// kernel has it (QEMU already runs under a uid that owns nothing).
//
// What host git's configuration names in a read-write share (a husky core.hooksPath, an include
// target, an fsmonitor or filter script: vm/share_git_config.h) is pinned read-only too where it
// exists, and guarded by the share guard where it does not; a configuration that cannot be read
// refuses the boot.
//
// Not covered (docs/threat-model.md): files other host tools act on when a folder is opened
// (.vscode/, .idea/, .envrc), and configuration the user changes while QEMU runs (read at the
// next boot).
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "base/result.h"
#include "vm/qemu_access.h"
#include "vm/share_guard.h"

namespace cloister::vm {

struct JailShare {
  std::string host_path;  // absolute path of the shared directory
  int fd = -1;            // the fd QEMU is given for it (/proc/self/fd/N); Enter() replaces it
  bool read_only = false;
};

struct JailSpec {
  std::vector<JailShare> shares;
  std::vector<int> read_fds;  // regular files QEMU reopens by /proc/self/fd/N (kernel, initramfs)
  bool kvm = false;           // /dev/kvm read-write
  // Extra paths QEMU may read (and execute) below, e.g. a QEMU built outside /usr; tests only.
  std::vector<std::string> extra_read_paths;
  // Who QEMU runs as (QemuIdentityFor): as root, Enter() drops to it inside QEMU's user
  // namespace, where it is the guest user's uid; the spawn must not drop again.
  QemuIdentity identity;
};

// What the kernel offers, probed once.
struct JailSupport {
  int landlock_abi = 0;     // 0: no Landlock (not built, not enabled in the LSM list, or too old)
  bool user_ns = false;     // an unprivileged user + mount namespace can be made
  bool guard = false;       // seccomp user notifications with SECCOMP_ADDFD_FLAG_SEND (5.14)
  std::string detail;       // what was found, for errors and `--help`-true messages
};
JailSupport ProbeJailSupport();

// One mount the jail makes inside a share (for logs and tests).
struct JailMount {
  std::string share;     // host path of the share
  std::string relative;  // path below the share ("" = the share itself)
  bool directory = false;
  bool read_only = false;  // false: a pin (a writable bind of the path onto itself)
  bool idmapped = false;   // the share's own mount, owner and group seen as QEMU's
};

class QemuJail {
 public:
  // Checks the shares, finds what to mount in them (vm/share_scan.h, vm/share_git_config.h: runs
  // host git to list its configuration), makes the user namespaces (root), builds the Landlock
  // ruleset and the guard's filter. Refuses (kFailedPrecondition,
  // with a hint) what it cannot jail.
  static Result<std::unique_ptr<QemuJail>> Prepare(const JailSpec& spec);
  ~QemuJail();
  QemuJail(const QemuJail&) = delete;
  QemuJail& operator=(const QemuJail&) = delete;

  // In the forked child, before exec. Only raw system calls. Returns 0, or a step number (>0)
  // that failed, with errno set; the caller must then _exit, never exec.
  int Enter() const;
  // A line naming the failed step of Enter() (static storage; async-signal-safe to write(2)).
  static const char* StepName(int step);
  // In the supervisor once QEMU is spawned (`qemu` is its pid): serves the share guard for it
  // (vm/share_guard.h), if a share is read-write. On an error the caller must kill QEMU.
  Status StartGuard(pid_t qemu);

  const std::vector<JailMount>& mounts() const { return mounts_; }
  bool landlock() const { return ruleset_fd_ >= 0; }
  bool user_ns() const { return user_ns_; }

 private:
  QemuJail() = default;
  struct Target {
    size_t share;
    std::string relative;
    bool directory;
    bool read_only;
  };
  Status PrepareShares(const JailSpec& spec);
  Status PrepareIdentity(const JailSpec& spec);
  int EnterShare(size_t share, size_t* next_target) const;
  int EnterGuard() const;
  int EnterIdentity() const;

  std::vector<JailShare> shares_;
  std::vector<int> idmap_fds_;  // per share: its idmapping user namespace, or -1
  std::vector<Target> targets_;  // per share, the share's own mount (relative "") first
  std::vector<JailMount> mounts_;
  bool user_ns_ = false;
  std::string uid_map_, gid_map_;
  int qemu_userns_fd_ = -1;  // root: the user namespace QEMU enters
  uid_t inside_uid_ = 0;
  gid_t inside_gid_ = 0;
  std::vector<gid_t> inside_groups_;
  int ruleset_fd_ = -1;
  std::vector<sock_filter> guard_filter_;  // empty: no read-write share, no guard
  int guard_sock_[2] = {-1, -1};           // the supervisor's end, the child's end
  ShareGuardConfig guard_;
};

}  // namespace cloister::vm
