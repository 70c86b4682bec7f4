// Which new names the guest may give an entry in a read-write shared folder (issue 38): the rule
// the share guard (vm/share_guard.h) applies to every entry QEMU creates, links or renames there,
// so that no git directory the host did not make can appear below a share.
//
// Host git uses a directory as a repository when it finds `.git` (a directory, a file naming a
// git dir elsewhere, or a symlink) in it or a parent, or when the directory itself looks like a
// git dir (`HEAD` beside `objects/` and `refs/`, or beside a `commondir`). Every git dir present
// at boot is pinned by the jail (vm/share_scan.h): a mount of its own, with config, hooks and the
// rest read-only. So, for a new name in a directory:
//  - `.git` is refused everywhere (any case: a case-folding directory finds `.GIT` as `.git`);
//  - `HEAD` is refused outside a pinned git dir;
//  - `objects`, `refs` and `commondir` are refused beside an existing `HEAD` outside a pinned
//    git dir (a `HEAD` file the host made, e.g. a test fixture, cannot be completed into one);
//  - at the top of a pinned git dir, what git executes from or is redirected by (`config`,
//    `config.worktree`, `commondir`, `hooks`, `info`, `modules`, `worktrees`) is refused (those
//    that exist at boot are read-only binds; these are the missing ones);
//  - a name that is not one path component (empty, `.`, `..`, a `/`, over 255 bytes, a NUL) is
//    refused: QEMU's 9p server never asks for one.
// Names are compared ASCII case-insensitively.
//
// SECURITY: `name` is read from QEMU's memory and chosen by the guest: any bytes, any length.
#pragma once

#include <string_view>

namespace cloister::vm {

struct NewNameContext {
  bool in_git_dir = false;    // the directory lies in a pinned git dir (its mount is a pin)
  bool git_dir_top = false;   // the directory is the pinned git dir itself
  bool holds_head = false;    // the directory holds an entry named HEAD (asked only when needed)
};

// 0 when the name may be created there, else the errno to answer (EPERM). `holds_head` is called
// only for names that need it (it costs a lookup).
template <typename HoldsHead>
int CheckNewName(std::string_view name, const NewNameContext& where, HoldsHead holds_head);

// The rule without the lazy lookup (tests, fuzzing).
int CheckNewNameWith(std::string_view name, const NewNameContext& where);

// True when `name` is one path component: not empty, not `.` or `..`, no `/` or NUL, at most 255
// bytes.
bool IsOneComponent(std::string_view name);
bool EqualsFold(std::string_view a, std::string_view b);
// A name that only matters beside a HEAD (objects, refs, commondir).
bool NeedsHeadCheck(std::string_view name);

template <typename HoldsHead>
int CheckNewName(std::string_view name, const NewNameContext& where, HoldsHead holds_head) {
  NewNameContext ctx = where;
  if (!ctx.in_git_dir && IsOneComponent(name) && NeedsHeadCheck(name)) ctx.holds_head = holds_head();
  return CheckNewNameWith(name, ctx);
}

}  // namespace cloister::vm
