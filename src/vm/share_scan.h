// What the jail mounts inside one read-write shared folder (issue 15 item 2, issue 38): every git
// dir below it, found by walking the whole folder at boot, is pinned and has what host git
// executes from made read-only.
//
// A git dir is a directory named `.git` (any case), or a directory that looks like one to git
// (`HEAD` beside `objects`, `refs` or `commondir`: a bare repository, a submodule's or a linked
// worktree's git dir, the share itself when it is a bare repository). For each:
//  - a pin: a bind of the directory onto itself, so the guest cannot rename or remove it and put a
//    git dir of its own in its place (a mount point cannot be moved); the share guard
//    (vm/share_guard.h) knows the pins by their mounts;
//  - read-only binds over `config`, `config.worktree`, `commondir`, `hooks/`, `info/`, `modules/`
//    and `worktrees/` where they exist (the guard refuses creating the missing ones), and the git
//    dirs inside the last two protected the same way;
//  - a `.git` FILE (a linked worktree or a submodule checkout) is itself covered read-only.
// The walk never follows a symlink and never descends into a git dir (its modules/ and
// worktrees/ are scanned for git dirs instead); a `.git` that is neither a directory nor a regular
// file, a protected path of the wrong type, or more than 512 git dirs refuse the boot.
//
// SECURITY: the folder's contents may have been written by a guest (this one's last boot, or
// another workspace sharing the folder now): every lookup is relative to an fd, never follows a
// symlink, and what it did not expect is refused with a hint. Nothing here reads file contents.
#pragma once

#include <string>
#include <vector>

#include "base/result.h"

namespace cloister::vm {

struct ShareMountTarget {
  std::string relative;  // below the share ("" = the share itself)
  bool directory = false;
  bool read_only = false;  // false: a pin (a writable bind of the path onto itself)
};

struct ShareScan {
  // In mount order: what lies inside a git dir before the git dir's own pin (the pin's bind
  // clones them recursively).
  std::vector<ShareMountTarget> targets;
  // The git dirs ("" = the share itself): the guard's "inside a git dir" is "on one of these
  // mounts".
  std::vector<std::string> git_dirs;
  // The `.git` files (gitfiles: a linked worktree's or a submodule checkout's), relative.
  std::vector<std::string> gitfiles;
};

// `share_fd`: an O_PATH or O_RDONLY directory fd of the share, `share` its path (for messages).
Result<ShareScan> ScanShare(const std::string& share, int share_fd);

// The error every refusal carries (the hint says how to fix it on the host).
Error RefuseShare(const std::string& share, const std::string& what);

// openat2(root, rel, O_PATH|O_NOFOLLOW, RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS): -1 and errno on
// failure; a trailing symlink is returned as itself.
int OpenBeneath(int root, const char* rel);

}  // namespace cloister::vm
