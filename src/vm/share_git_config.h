// What host git's configuration makes git run from inside a read-write shared folder (issue 38):
// read at boot, after the walk (vm/share_scan.h) found the shares' git dirs, so that the jail
// pins what exists read-only and the share guard (vm/share_guard.h) refuses making what does
// not. A husky repository's `core.hooksPath=.husky/_`, an `include.path` naming a file in the
// working tree, a `core.fsmonitor` or a filter naming a script there: the guest would write the
// hook, the configuration or the script, and the user's next `git status` or `git fetch` (an
// IDE's, unasked) would run it.
//
// How: host git itself lists the configuration (`git config --list --show-origin -z
// --no-includes`), once per repository and once per home, with a clean environment (HOME, PATH,
// LANG only) and the system configuration included (every user's git reads it):
//  - every repository below a read-write share (its git dirs and gitfiles, from the walk) and the
//    one the share itself lies in (the nearest `.git` above it), with `--git-dir`: no ownership
//    check, no discovery (one git calls "not a git repository", a stale gitfile, is skipped: host
//    git fails there too);
//  - the system and global configuration of every home that may look at the folder: the
//    caller's ($HOME if set, and its passwd entry) and each share owner's (passwd), with
//    $XDG_CONFIG_HOME when the caller has one;
//  - every include directive's target, whatever its condition (`onbranch:` follows the guest's
//    HEAD), read with `--file`, recursively (at most 256 files).
// Then vm/git_config_paths.h names the paths; each one inside a read-write share (symlinks
// outside the shares followed, none inside) is protected there: the configuration files read
// (including the global ones, missing or not, when a share holds a home), hook directories,
// include targets and the programs and scripts of commands.
// Reading configuration runs nothing: `git config` runs no hook, no fsmonitor, no pager (no
// terminal, --no-pager), and the git program is taken from /usr/local/bin, /usr/bin or /bin,
// never from a PATH entry a share could hold.
//
// Fail closed: no git on the host, a listing git cannot produce (a syntax error, 10 s, 4 MiB),
// a path that reaches into a share through a symlink inside it, a protected path of another type
// than a file or directory, a pinned file with other hard links (the guest could write it through
// them), or a path naming a share itself: the boot is refused, with a hint. Refusing says what
// to fix; serving the share read-only instead would break the agent's writes without a word.
//
// SECURITY: the configuration may include files the guest wrote (before the configuration
// named them): they are parsed as data, with bounds (vm/git_config_paths.h). Nothing is
// executed from a share and no symlink inside a share is followed.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "base/result.h"
#include "vm/git_config_paths.h"
#include "vm/share_scan.h"

namespace cloister::vm {

// Who may look at the shared folders with git.
struct GitConfigScope {
  std::string git;  // host git, absolute
  // (HOME, XDG_CONFIG_HOME or "") per home whose global configuration is read.
  std::vector<std::pair<std::string, std::string>> homes;
};

// /usr/local/bin/git, /usr/bin/git or /bin/git, the first that is an executable file.
std::optional<std::string> FindHostGit();

// The scope for a supervisor whose shares belong to `owners`: $HOME and $XDG_CONFIG_HOME from the
// environment when set, the caller's passwd home, and each owner's.
GitConfigScope HostGitScope(const std::string& git, const std::vector<uid_t>& owners);

// One repository's git dir and the directory git runs in for it (the working tree's top where
// known; the git dir otherwise). Absolute.
struct GitRepository {
  std::string git_dir;
  std::string work_dir;
};

// Every path the configuration names, for every repository and home in scope. Errors: git could
// not list a configuration (kFailedPrecondition, naming it).
Result<std::vector<NamedPath>> ReadGitConfigPaths(const std::vector<GitRepository>& repos,
                                                  const GitConfigScope& scope);

// One shared folder, as the jail sees it at Prepare.
struct GitConfigShare {
  std::string host_path;  // absolute
  int fd = -1;            // a directory fd of it (O_PATH is enough)
  bool read_only = false;
  const ShareScan* scan = nullptr;  // read-write shares: the walk's result
};

// What one read-write share gets for the configuration.
struct GitConfigProtection {
  std::vector<ShareMountTarget> targets;  // read-only binds of what exists (after the walk's)
  std::vector<std::string> guarded;       // relative paths the share guard keeps from being made
};

// Per share, in order (nothing for a read-only share). Errors refuse the boot.
Result<std::vector<GitConfigProtection>> ProtectGitConfigPaths(const std::vector<GitConfigShare>& shares,
                                                               const GitConfigScope& scope);

}  // namespace cloister::vm
