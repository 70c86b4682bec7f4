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
//  - a non-root caller: unshare(CLONE_NEWUSER | CLONE_NEWNS), uid/gid mapped to themselves (QEMU
//    still runs as the user, without capabilities after exec); root: unshare(CLONE_NEWNS) (QEMU
//    then drops to its own uid, vm/qemu_access.h). Every mount becomes a slave: nothing done here
//    reaches the host's mount table.
//  - a read-only share: the whole folder is a read-only bind (the kernel enforces what QEMU's
//    readonly=on only asks for).
//  - a read-write share whose top has a `.git` directory: that directory and each existing
//    submodule/worktree git dir under it is pinned (a bind onto itself, so the guest cannot rename
//    or remove it and put a git dir of its own in its place), and read-only binds cover, in each:
//    config, config.worktree, commondir, hooks/, info/, modules/ and worktrees/ (the git dirs
//    inside the last two stay writable but for their own config, hooks, info, commondir...).
//    A `.git` FILE (a linked worktree or a submodule checkout) is itself covered read-only.
//    Guest git still commits, branches, fetches and pushes (objects, refs, logs, index, HEAD,
//    packed-refs are writable); it cannot change config (`git config`, `git remote add`), add a
//    submodule or a worktree of the shared repo: do those on the host.
//  - every target is resolved below the share with openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)
//    and must have the type Prepare saw: a symlink or a swap the guest planted fails the boot.
//  - the fd QEMU is told to use for each share (/proc/self/fd/N) is reopened inside the namespace,
//    so QEMU's 9p root is the namespace's view (an fd opened outside would see none of the binds).
//  - empty tmpfs over /tmp, /var/tmp, /run and /dev/shm: no path to an agent or daemon socket.
//  - Landlock (PR_SET_NO_NEW_PRIVS, then landlock_restrict_self) with every access right the
//    kernel knows handled, abstract unix sockets and signals scoped to QEMU's own domain.
//
// SECURITY: everything inside a share is written by the guest; Prepare and Enter never follow a
// symlink in it and refuse what they did not expect. Nothing here reads file contents.
//
// Fail closed: a non-root caller needs both unprivileged user namespaces and Landlock (refused with
// the figures and a hint otherwise); as root the mount namespace always applies and Landlock is
// added where the kernel has it (QEMU already runs under a uid that owns nothing).
//
// Not covered (docs/threat-model.md): a share with no `.git` at its top, or a repository the guest
// creates below it (host git run inside a directory the guest made reads the guest's config; as
// root that directory belongs to QEMU's uid and git refuses it as of "dubious ownership"); a
// repository whose git dir lies elsewhere inside the share.
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "base/result.h"

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
};

// What the kernel offers, probed once.
struct JailSupport {
  int landlock_abi = 0;     // 0: no Landlock (not built, not enabled in the LSM list, or too old)
  bool user_ns = false;     // an unprivileged user + mount namespace can be made
  std::string detail;       // what was found, for errors and `--help`-true messages
};
JailSupport ProbeJailSupport();

// One mount the jail makes inside a share (for logs and tests).
struct JailMount {
  std::string share;     // host path of the share
  std::string relative;  // path below the share ("" = the share itself)
  bool directory = false;
  bool read_only = false;  // false: a pin (a writable bind of the path onto itself)
};

class QemuJail {
 public:
  // Checks the shares, creates missing mount targets (owned like the git dir that holds them),
  // builds the Landlock ruleset. Refuses (kFailedPrecondition, with a hint) what it cannot jail.
  static Result<std::unique_ptr<QemuJail>> Prepare(const JailSpec& spec);
  ~QemuJail();
  QemuJail(const QemuJail&) = delete;
  QemuJail& operator=(const QemuJail&) = delete;

  // In the forked child, before exec. Only raw system calls. Returns 0, or a step number (>0)
  // that failed, with errno set; the caller must then _exit, never exec.
  int Enter() const;
  // A line naming the failed step of Enter() (static storage; async-signal-safe to write(2)).
  static const char* StepName(int step);

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
  std::vector<JailShare> shares_;
  std::vector<Target> targets_;
  std::vector<JailMount> mounts_;
  bool user_ns_ = false;
  std::string uid_map_, gid_map_;
  int ruleset_fd_ = -1;
};

}  // namespace cloister::vm
