// Which files host git's configuration makes git execute or read configuration from (issue 38):
// the pure half of vm/share_git_config.h. Given the entries `git config --list --show-origin -z`
// prints, it names every path an entry points at, so that the jail can keep the guest from
// writing one that lies in a read-write shared folder.
//
// Keys, by what git does with the value (keys as git prints them: section and name lowercased):
//  - a path git runs programs from: core.hooksPath (a directory of hooks), init.templateDir (hooks
//    copied into new repositories);
//  - a configuration file: include.path, includeIf.<condition>.path (every condition, true or not:
//    `onbranch:` follows the branch, which the guest moves), relative to the including file;
//  - a shell command (its program and its arguments may name files): core.fsmonitor (unless a
//    boolean), core.sshCommand, core.gitProxy, core.askPass, core.pager, pager.<cmd> (unless a
//    boolean), core.editor, sequence.editor, core.alternateRefsCommand, diff.external,
//    diff.<driver>.command, diff.<driver>.textconv, difftool.<tool>.cmd/.path,
//    mergetool.<tool>.cmd/.path, merge.<driver>.driver, filter.<driver>.clean/.smudge/.process,
//    credential.helper and credential.<url>.helper (a leading `!` dropped), gpg.program,
//    gpg.<format>.program,
//    gpg.ssh.defaultKeyCommand, remote.<name>.uploadpack/.receivepack, uploadpack.packObjectsHook,
//    hook.<name>.command, trailer.<token>.command/.cmd, interactive.diffFilter,
//    sendemail.sendmailCmd/.smtpServer/.toCmd/.ccCmd/.headerCmd, browser.<tool>.cmd/.path,
//    man.<tool>.cmd/.path, lfs.customtransfer.<name>.path, lfs.extension.<name>.clean/.smudge;
//    alias.<name> and submodule.<name>.update when they start with `!`; remote.<name>.url,
//    remote.<name>.pushurl, url.<base>.insteadOf/.pushInsteadOf when they start with `ext::`.
// A command is split into shell words (quotes removed, split at blanks and at ; & | ( ) < > `).
// Named are: every word (or the part after a word's first `=`) that is absolute, starts with `~`,
// `$HOME` or `${HOME}`, or holds a `/` (relative ones against the repository's base: the working
// tree's top, where git runs them); and every other argument word (not a command's first word,
// not an option, no `$`, `%`, `*`, `?`, `=`) as a "bare" name relative to the base (`sh fsm.sh`
// runs ./fsm.sh). A command's first word without a `/` is looked up in PATH: not named.
//
// Not followed: other shell expansions (`$VAR` but HOME, globs, `~user` where no home is known),
// PATH entries, and what a named program itself reads or runs.
//
// SECURITY: the entries may come from a file the guest wrote (an include target in a share): the
// listing is parsed with bounds (4 MiB, 100,000 entries, 64 KiB per value) and a malformed one is
// an error, never a crash. Nothing here touches the filesystem.
#pragma once

#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"

namespace cloister::vm {

struct GitConfigEntry {
  std::string origin;  // as git prints it: "file:/path", "command line:", "blob:..."
  std::string key;     // section[.subsection].name
  std::string value;
  bool has_value = false;  // false: `name` alone in its section (a boolean true)
};

inline constexpr size_t kMaxGitConfigListing = 4 << 20;
inline constexpr size_t kMaxGitConfigEntries = 100000;
inline constexpr size_t kMaxGitConfigValue = 64 << 10;

// `git config --list --show-origin -z`: per entry "ORIGIN\0KEY\nVALUE\0" or "ORIGIN\0KEY\0".
Result<std::vector<GitConfigEntry>> ParseGitConfigList(std::string_view listing);

enum class GitValueKind { kNone, kHookPath, kInclude, kCommand };

// What git does with `key`'s `value` (the command of a `!` or `ext::` value is what follows it).
struct GitValueUse {
  GitValueKind kind = GitValueKind::kNone;
  std::string_view text;  // the path or the command, within `value`
};
GitValueUse UseOfGitValue(std::string_view key, std::string_view value);

// A command's shell words; `first` marks each simple command's first non-assignment word.
struct ShellWord {
  std::string text;
  bool first = false;
};
std::vector<ShellWord> ShellWords(std::string_view command);

// Where an entry's relative paths resolve.
struct GitPathBase {
  std::string base;                // the working tree's top (or the git dir of a bare repository);
                                   // empty: relative paths other than includes are dropped
  std::vector<std::string> homes;  // for `~` and `$HOME` (every one is tried)
  // `~user`: that user's home, if known (nullopt: the path is not named).
  std::function<std::optional<std::string>(const std::string&)> user_home;
};

struct NamedPath {
  std::string path;      // absolute, lexically normal
  bool include = false;  // a configuration file git reads (to be read in turn)
  bool bare = false;     // a bare argument word: named only if it is a regular file or missing
  bool operator==(const NamedPath&) const = default;
};

// The paths `entry` names (in order, without duplicates). The origin file of an entry is not
// among them (the caller adds it).
std::vector<NamedPath> PathsNamedBy(const GitConfigEntry& entry, const GitPathBase& where);

// "/a/./b//c/../d" -> "/a/b/d"; ".." above "/" stays at "/". `path` must be absolute.
std::string NormalizeAbsolute(std::string_view path);

// The directory of an entry's origin file ("file:/x/y" -> "/x"), if the origin is a file.
std::optional<std::string> OriginDirectory(std::string_view origin);

}  // namespace cloister::vm
