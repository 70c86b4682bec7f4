#include "vm/git_config_paths.h"

#include <algorithm>
#include <cstring>

namespace cloister::vm {
namespace {

bool EqualsLower(std::string_view a, std::string_view lower) {
  if (a.size() != lower.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    char c = a[i];
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    if (c != lower[i]) return false;
  }
  return true;
}

// What git_parse_maybe_bool() takes for a boolean: the words, an empty value, an integer.
bool IsGitBool(std::string_view v) {
  for (const char* word : {"true", "yes", "on", "false", "no", "off", ""}) {
    if (EqualsLower(v, word)) return true;
  }
  size_t i = (v[0] == '-' || v[0] == '+') ? 1 : 0;
  if (i == v.size()) return false;
  for (; i < v.size(); ++i) {
    if (v[i] < '0' || v[i] > '9') return false;
  }
  return true;
}

enum class Sub { kNone, kRequired, kEither };
enum class Form { kPlain, kUnlessBool, kBang, kBangOrPlain, kExt };

struct KeyRule {
  const char* section;
  Sub sub;
  const char* name;  // "*": any name
  GitValueKind kind;
  Form form;
};

constexpr GitValueKind kCmd = GitValueKind::kCommand;
constexpr KeyRule kRules[] = {
    {"core", Sub::kNone, "hookspath", GitValueKind::kHookPath, Form::kPlain},
    {"init", Sub::kNone, "templatedir", GitValueKind::kHookPath, Form::kPlain},
    {"include", Sub::kNone, "path", GitValueKind::kInclude, Form::kPlain},
    {"includeif", Sub::kRequired, "path", GitValueKind::kInclude, Form::kPlain},
    {"core", Sub::kNone, "fsmonitor", kCmd, Form::kUnlessBool},
    {"core", Sub::kNone, "sshcommand", kCmd, Form::kPlain},
    {"core", Sub::kNone, "gitproxy", kCmd, Form::kPlain},
    {"core", Sub::kNone, "askpass", kCmd, Form::kPlain},
    {"core", Sub::kNone, "pager", kCmd, Form::kPlain},
    {"core", Sub::kNone, "editor", kCmd, Form::kPlain},
    {"core", Sub::kNone, "alternaterefscommand", kCmd, Form::kPlain},
    {"sequence", Sub::kNone, "editor", kCmd, Form::kPlain},
    {"pager", Sub::kNone, "*", kCmd, Form::kUnlessBool},
    {"diff", Sub::kNone, "external", kCmd, Form::kPlain},
    {"diff", Sub::kRequired, "command", kCmd, Form::kPlain},
    {"diff", Sub::kRequired, "textconv", kCmd, Form::kPlain},
    {"difftool", Sub::kRequired, "cmd", kCmd, Form::kPlain},
    {"difftool", Sub::kRequired, "path", kCmd, Form::kPlain},
    {"mergetool", Sub::kRequired, "cmd", kCmd, Form::kPlain},
    {"mergetool", Sub::kRequired, "path", kCmd, Form::kPlain},
    {"merge", Sub::kRequired, "driver", kCmd, Form::kPlain},
    {"filter", Sub::kRequired, "clean", kCmd, Form::kPlain},
    {"filter", Sub::kRequired, "smudge", kCmd, Form::kPlain},
    {"filter", Sub::kRequired, "process", kCmd, Form::kPlain},
    {"credential", Sub::kEither, "helper", kCmd, Form::kBangOrPlain},
    {"gpg", Sub::kEither, "program", kCmd, Form::kPlain},
    {"gpg", Sub::kRequired, "defaultkeycommand", kCmd, Form::kPlain},
    {"remote", Sub::kRequired, "uploadpack", kCmd, Form::kPlain},
    {"remote", Sub::kRequired, "receivepack", kCmd, Form::kPlain},
    {"uploadpack", Sub::kNone, "packobjectshook", kCmd, Form::kPlain},
    {"hook", Sub::kRequired, "command", kCmd, Form::kPlain},
    {"trailer", Sub::kRequired, "command", kCmd, Form::kPlain},
    {"trailer", Sub::kRequired, "cmd", kCmd, Form::kPlain},
    {"interactive", Sub::kNone, "difffilter", kCmd, Form::kPlain},
    {"sendemail", Sub::kEither, "sendmailcmd", kCmd, Form::kPlain},
    {"sendemail", Sub::kEither, "smtpserver", kCmd, Form::kPlain},
    {"sendemail", Sub::kEither, "tocmd", kCmd, Form::kPlain},
    {"sendemail", Sub::kEither, "cccmd", kCmd, Form::kPlain},
    {"sendemail", Sub::kEither, "headercmd", kCmd, Form::kPlain},
    {"browser", Sub::kRequired, "cmd", kCmd, Form::kPlain},
    {"browser", Sub::kRequired, "path", kCmd, Form::kPlain},
    {"man", Sub::kRequired, "cmd", kCmd, Form::kPlain},
    {"man", Sub::kRequired, "path", kCmd, Form::kPlain},
    {"lfs", Sub::kRequired, "path", kCmd, Form::kPlain},
    {"lfs", Sub::kRequired, "clean", kCmd, Form::kPlain},
    {"lfs", Sub::kRequired, "smudge", kCmd, Form::kPlain},
    {"alias", Sub::kEither, "*", kCmd, Form::kBang},
    {"submodule", Sub::kRequired, "update", kCmd, Form::kBang},
    {"remote", Sub::kRequired, "url", kCmd, Form::kExt},
    {"remote", Sub::kRequired, "pushurl", kCmd, Form::kExt},
    {"url", Sub::kRequired, "insteadof", kCmd, Form::kExt},
    {"url", Sub::kRequired, "pushinsteadof", kCmd, Form::kExt},
};

bool IsBlank(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

// The words after which the next one is a program again.
bool IsPrefixWord(std::string_view w) {
  for (const char* p : {"exec", "command", "env", "nice", "nohup", "time", "sudo", "then", "do", "else",
                        "if", "elif", "while", "until", "!", "{", "xargs"}) {
    if (w == p) return true;
  }
  return false;
}

bool IsAssignment(std::string_view w) {
  size_t eq = w.find('=');
  if (eq == 0 || eq == std::string_view::npos) return false;
  for (size_t i = 0; i < eq; ++i) {
    char c = w[i];
    bool ok = c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (i > 0 && c >= '0' && c <= '9');
    if (!ok) return false;
  }
  return true;
}

void AddUnique(std::vector<NamedPath>* out, NamedPath p) {
  if (std::find(out->begin(), out->end(), p) == out->end()) out->push_back(std::move(p));
}

std::string JoinAbs(const std::string& base, std::string_view rel) {
  return NormalizeAbsolute(base + "/" + std::string(rel));
}

// `text` with a leading `~`, `~user`, `$HOME` or `${HOME}` expanded, one result per home; or
// `text` itself when it has none. Empty when it cannot be expanded.
std::vector<std::string> ExpandHome(std::string_view text, const GitPathBase& where, bool shell) {
  std::string_view rest;
  std::vector<std::string> homes;
  if (text[0] == '~') {
    size_t slash = text.find('/');
    std::string_view user = text.substr(1, slash == std::string_view::npos ? std::string_view::npos : slash - 1);
    rest = slash == std::string_view::npos ? std::string_view() : text.substr(slash);
    if (user.empty()) {
      homes = where.homes;
    } else if (where.user_home) {
      if (auto h = where.user_home(std::string(user))) homes.push_back(*h);
    }
  } else if (shell && (text.rfind("$HOME", 0) == 0 || text.rfind("${HOME}", 0) == 0)) {
    size_t skip = text[1] == '{' ? 7 : 5;
    rest = text.substr(skip);
    if (!rest.empty() && rest[0] != '/') return {};  // $HOMEX
    homes = where.homes;
  } else {
    return {std::string(text)};
  }
  std::vector<std::string> out;
  for (const std::string& h : homes) {
    if (!h.empty() && h[0] == '/') out.push_back(NormalizeAbsolute(h + std::string(rest)));
  }
  return out;
}

// A path-valued entry (hooksPath, an include): `~` expanded, relative against `base`.
void NamePath(std::string_view text, const std::string& base, const GitPathBase& where, bool include,
              std::vector<NamedPath>* out) {
  if (text.empty() || text.rfind("%(prefix)/", 0) == 0) return;  // git's own install prefix
  if (text[0] == '~') {
    for (std::string& p : ExpandHome(text, where, false)) AddUnique(out, {std::move(p), include, false});
  } else if (text[0] == '/') {
    AddUnique(out, {NormalizeAbsolute(text), include, false});
  } else if (!base.empty()) {
    AddUnique(out, {JoinAbs(base, text), include, false});
  }
}

// One shell word (or the value after a word's `=`) of a command.
void NameWord(std::string_view w, bool first, bool whole, const GitPathBase& where,
              std::vector<NamedPath>* out) {
  if (w.empty()) return;
  if (w[0] == '~' || w[0] == '$') {
    for (std::string& p : ExpandHome(w, where, true)) {
      if (p.find('$') == std::string::npos) AddUnique(out, {std::move(p), false, false});
    }
    return;
  }
  if (w.find('$') != std::string_view::npos) return;  // another variable: unknown
  if (w[0] == '/') {
    AddUnique(out, {NormalizeAbsolute(w), false, false});
    return;
  }
  if (where.base.empty()) return;
  if (w.find('/') != std::string_view::npos) {
    AddUnique(out, {JoinAbs(where.base, w), false, false});
    return;
  }
  // A bare argument: `sh fsm.sh` opens ./fsm.sh. Not a program (PATH), an option, a pattern or
  // a placeholder.
  if (first || !whole || w[0] == '-' || w == "." || w == "..") return;
  if (w.find_first_of("%*?[=") != std::string_view::npos) return;
  if (std::all_of(w.begin(), w.end(), [](char c) { return c >= '0' && c <= '9'; })) return;
  AddUnique(out, {JoinAbs(where.base, w), false, true});
}

}  // namespace

// SECURITY: bounded; any byte sequence is an error or entries, never a read out of bounds.
Result<std::vector<GitConfigEntry>> ParseGitConfigList(std::string_view listing) {
  if (listing.size() > kMaxGitConfigListing) {
    return Error(ErrorCode::kCorrupt, "git config listing over " + std::to_string(kMaxGitConfigListing) + " bytes");
  }
  std::vector<GitConfigEntry> out;
  size_t at = 0;
  while (at < listing.size()) {
    if (out.size() >= kMaxGitConfigEntries) {
      return Error(ErrorCode::kCorrupt, "git config listing over " + std::to_string(kMaxGitConfigEntries) + " entries");
    }
    size_t origin_end = listing.find('\0', at);
    if (origin_end == std::string_view::npos) return Error(ErrorCode::kCorrupt, "git config listing: origin without its end");
    size_t entry_end = listing.find('\0', origin_end + 1);
    if (entry_end == std::string_view::npos) return Error(ErrorCode::kCorrupt, "git config listing: entry without its end");
    GitConfigEntry e;
    e.origin = std::string(listing.substr(at, origin_end - at));
    std::string_view entry = listing.substr(origin_end + 1, entry_end - origin_end - 1);
    size_t nl = entry.find('\n');
    e.key = std::string(entry.substr(0, nl));
    if (nl != std::string_view::npos) {
      e.has_value = true;
      e.value = std::string(entry.substr(nl + 1));
    }
    if (e.key.empty() || e.key.find('.') == std::string::npos || e.key.size() > 1024) {
      return Error(ErrorCode::kCorrupt, "git config listing: a key that is not section.name");
    }
    if (e.value.size() > kMaxGitConfigValue) {
      return Error(ErrorCode::kCorrupt, "git config: the value of " + e.key.substr(0, 200) + " is over " +
                                            std::to_string(kMaxGitConfigValue) + " bytes");
    }
    out.push_back(std::move(e));
    at = entry_end + 1;
  }
  return out;
}

GitValueUse UseOfGitValue(std::string_view key, std::string_view value) {
  size_t first = key.find('.'), last = key.rfind('.');
  if (first == std::string_view::npos) return {};
  std::string_view section = key.substr(0, first), name = key.substr(last + 1);
  const bool has_sub = first != last;
  for (const KeyRule& r : kRules) {
    if (!EqualsLower(section, r.section)) continue;
    if ((r.sub == Sub::kNone && has_sub) || (r.sub == Sub::kRequired && !has_sub)) continue;
    if (std::strcmp(r.name, "*") != 0 && !EqualsLower(name, r.name)) continue;
    switch (r.form) {
      case Form::kPlain: return {r.kind, value};
      case Form::kUnlessBool: return IsGitBool(value) ? GitValueUse{} : GitValueUse{r.kind, value};
      case Form::kBang:
        return !value.empty() && value[0] == '!' ? GitValueUse{r.kind, value.substr(1)} : GitValueUse{};
      case Form::kBangOrPlain:
        return {r.kind, !value.empty() && value[0] == '!' ? value.substr(1) : value};
      case Form::kExt:
        return value.rfind("ext::", 0) == 0 ? GitValueUse{r.kind, value.substr(5)} : GitValueUse{};
    }
  }
  return {};
}

std::vector<ShellWord> ShellWords(std::string_view cmd) {
  std::vector<ShellWord> out;
  std::string word;
  bool in_word = false, next_first = true;
  auto end_word = [&] {
    if (!in_word) return;
    bool first = next_first && !IsAssignment(word);
    out.push_back({word, first});
    if (first) next_first = IsPrefixWord(word);
    word.clear();
    in_word = false;
  };
  for (size_t i = 0; i < cmd.size(); ++i) {
    char c = cmd[i];
    if (IsBlank(c)) {
      end_word();
      if (c == '\n') next_first = true;
    } else if (c == '#' && !in_word) {
      while (i < cmd.size() && cmd[i] != '\n') ++i;
      next_first = true;
    } else if (std::strchr(";&|()`", c) || (c == '$' && i + 1 < cmd.size() && cmd[i + 1] == '(')) {
      end_word();
      next_first = true;
      if (c == '$') ++i;
    } else if (c == '<' || c == '>') {
      end_word();
      next_first = false;  // the redirection's target is a file, not a program
    } else if (c == '\'') {
      in_word = true;
      size_t close = cmd.find('\'', i + 1);
      if (close == std::string_view::npos) close = cmd.size();
      word.append(cmd.substr(i + 1, close - i - 1));
      i = close;
    } else if (c == '"') {
      in_word = true;
      for (++i; i < cmd.size() && cmd[i] != '"'; ++i) {
        if (cmd[i] == '\\' && i + 1 < cmd.size() && std::strchr("\"\\$`\n", cmd[i + 1])) ++i;
        word.push_back(cmd[i]);
      }
    } else if (c == '\\') {
      in_word = true;
      if (i + 1 < cmd.size()) word.push_back(cmd[++i]);
    } else {
      in_word = true;
      word.push_back(c);
    }
  }
  end_word();
  return out;
}

std::vector<NamedPath> PathsNamedBy(const GitConfigEntry& entry, const GitPathBase& where) {
  std::vector<NamedPath> out;
  if (!entry.has_value) return out;
  GitValueUse use = UseOfGitValue(entry.key, entry.value);
  switch (use.kind) {
    case GitValueKind::kNone:
      break;
    case GitValueKind::kHookPath:
      NamePath(use.text, where.base, where, false, &out);
      break;
    case GitValueKind::kInclude:
      NamePath(use.text, OriginDirectory(entry.origin).value_or(""), where, true, &out);
      break;
    case GitValueKind::kCommand:
      for (const ShellWord& w : ShellWords(use.text)) {
        // `--file=x`, `VAR=x`: the value after `=` (a word is one path only if a `/` comes first).
        size_t eq = w.text.find('=');
        if (eq == std::string::npos || w.text.find('/') < eq) NameWord(w.text, w.first, true, where, &out);
        if (eq != std::string::npos) NameWord(std::string_view(w.text).substr(eq + 1), true, false, where, &out);
      }
      break;
  }
  return out;
}

std::string NormalizeAbsolute(std::string_view path) {
  std::vector<std::string_view> parts;
  size_t i = 0;
  while (i <= path.size()) {
    size_t slash = path.find('/', i);
    if (slash == std::string_view::npos) slash = path.size();
    std::string_view part = path.substr(i, slash - i);
    if (part == "..") {
      if (!parts.empty()) parts.pop_back();
    } else if (!part.empty() && part != ".") {
      parts.push_back(part);
    }
    i = slash + 1;
  }
  std::string out;
  for (std::string_view p : parts) {
    out += '/';
    out += p;
  }
  return out.empty() ? "/" : out;
}

std::optional<std::string> OriginDirectory(std::string_view origin) {
  if (origin.rfind("file:", 0) != 0) return std::nullopt;
  std::string_view path = origin.substr(5);
  if (path.empty() || path[0] != '/') return std::nullopt;
  std::string normal = NormalizeAbsolute(path);
  size_t slash = normal.rfind('/');
  return slash == 0 ? std::string("/") : normal.substr(0, slash);
}

}  // namespace cloister::vm
