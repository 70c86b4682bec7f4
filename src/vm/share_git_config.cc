#include "vm/share_git_config.h"

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <map>
#include <set>

#include "base/strings.h"
#include "base/subprocess.h"
#include "vm/share_policy.h"

namespace cloister::vm {
namespace {

constexpr size_t kMaxConfigFiles = 256;
constexpr size_t kMaxPinnedChildren = 4096;
constexpr auto kGitTimeout = std::chrono::seconds(10);

Error ConfigError(const std::string& what, const std::string& why) {
  return Error(ErrorCode::kFailedPrecondition, "cannot read host git's configuration (" + what + "): " + why,
               "fix it on the host (`git config --list --show-origin` shows it), or share the folder "
               "read-only (`-v DIR:GUEST:ro`)");
}

std::optional<std::string> PasswdHome(uid_t uid) {
  struct passwd pw, *found = nullptr;
  std::vector<char> buf(16384);
  if (getpwuid_r(uid, &pw, buf.data(), buf.size(), &found) != 0 || !found || !pw.pw_dir) return std::nullopt;
  std::string home = pw.pw_dir;
  if (home.empty() || home[0] != '/') return std::nullopt;
  return home;
}

std::optional<std::string> UserHome(const std::string& user) {
  struct passwd pw, *found = nullptr;
  std::vector<char> buf(16384);
  if (getpwnam_r(user.c_str(), &pw, buf.data(), buf.size(), &found) != 0 || !found || !pw.pw_dir) return std::nullopt;
  std::string home = pw.pw_dir;
  if (home.empty() || home[0] != '/') return std::nullopt;
  return home;
}

std::string ParentDir(const std::string& path) {
  size_t slash = path.rfind('/');
  return slash == 0 || slash == std::string::npos ? "/" : path.substr(0, slash);
}

std::string JoinBelow(const std::string& dir, const std::string& rel) {
  return rel.empty() ? dir : NormalizeAbsolute(dir + "/" + rel);
}

// `git config --list --show-origin -z --no-includes` with `before` (global options) and
// `after` (config options), as `home`'s user would see it, run in `cwd`.
Result<std::vector<GitConfigEntry>> ListConfig(const GitConfigScope& scope,
                                               const std::pair<std::string, std::string>& home,
                                               const std::vector<std::string>& before,
                                               const std::vector<std::string>& after, const std::string& cwd,
                                               const std::string& what, bool* not_a_repository = nullptr) {
  RunOptions o;
  o.clear_env = true;
  o.env_set = {{"HOME", home.first},
               {"PATH", "/usr/local/bin:/usr/bin:/bin"},
               {"LANG", "C"},
               {"GIT_OPTIONAL_LOCKS", "0"},
               {"GIT_TERMINAL_PROMPT", "0"}};
  if (!home.second.empty()) o.env_set["XDG_CONFIG_HOME"] = home.second;
  o.cwd = cwd;
  o.timeout = kGitTimeout;
  o.max_output = kMaxGitConfigListing;
  std::vector<std::string> argv = {scope.git, "--no-pager"};
  argv.insert(argv.end(), before.begin(), before.end());
  for (const char* a : {"config", "--list", "--show-origin", "-z", "--no-includes"}) argv.push_back(a);
  argv.insert(argv.end(), after.begin(), after.end());
  auto r = RunProcess(argv, o);
  if (!r.ok()) return ConfigError(what, r.error().message());
  if (r->timed_out) return ConfigError(what, "git config took over 10 s");
  if (r->output_truncated) return ConfigError(what, "git config printed over 4 MiB");
  if (!r->success() && not_a_repository && r->err.find("not a git repository") != std::string::npos) {
    *not_a_repository = true;  // a stale gitfile: host git fails there too, and runs nothing
    return std::vector<GitConfigEntry>();
  }
  if (!r->success()) {
    std::string last = Trim(r->err);
    if (size_t nl = last.rfind('\n'); nl != std::string::npos) last = last.substr(nl + 1);
    return ConfigError(what, "git config exited with " + std::to_string(r->exit_code) + (last.empty() ? "" : ": " + last));
  }
  auto parsed = ParseGitConfigList(r->out);
  if (!parsed.ok()) return ConfigError(what, parsed.error().message());
  return parsed;
}

bool IsTrue(const GitConfigEntry& e) {
  if (!e.has_value) return true;
  std::string v = e.value;
  for (char& c : v) c = static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  return v == "true" || v == "yes" || v == "on" || v == "1";
}

// Where a repository's relative hook paths and commands resolve (core.worktree, core.bare).
std::string BaseOf(const GitRepository& repo, const std::vector<GitConfigEntry>& entries) {
  std::optional<std::string> worktree;
  bool bare = false;
  for (const GitConfigEntry& e : entries) {
    if (e.key == "core.bare") bare = IsTrue(e);
    if (e.key == "core.worktree" && e.has_value && !e.value.empty()) worktree = e.value;
  }
  if (worktree) return (*worktree)[0] == '/' ? NormalizeAbsolute(*worktree) : JoinBelow(repo.git_dir, *worktree);
  return bare ? repo.git_dir : repo.work_dir;
}

// Follows every include, whatever its condition, reading each file once.
class ConfigReader {
 public:
  ConfigReader(const GitConfigScope& scope) : scope_(scope) {}

  Status Process(std::vector<GitConfigEntry> entries, const GitPathBase& base) {
    std::set<std::string> visited;
    while (!entries.empty()) {
      GitConfigEntry e = std::move(entries.back());
      entries.pop_back();
      if (auto dir = OriginDirectory(e.origin)) {
        Add({NormalizeAbsolute(e.origin.substr(5)), true, false});
      }
      for (NamedPath& p : PathsNamedBy(e, base)) {
        if (p.include && visited.insert(p.path).second) {
          ASSIGN_OR_RETURN(const std::vector<GitConfigEntry>* more, Read(p.path));
          if (more) entries.insert(entries.end(), more->begin(), more->end());
        }
        Add(std::move(p));
      }
    }
    return OkStatus();
  }

  void Add(NamedPath p) {
    auto [it, added] = named_.emplace(p.path, p);
    if (!added) {
      it->second.include = it->second.include || p.include;
      it->second.bare = it->second.bare && p.bare;
    }
  }

  std::vector<NamedPath> Take() {
    std::vector<NamedPath> out;
    for (auto& [path, p] : named_) out.push_back(std::move(p));
    return out;
  }

 private:
  // An include target's entries (nullptr: not a file this user could read; git skips it too).
  Result<const std::vector<GitConfigEntry>*> Read(const std::string& path) {
    auto cached = files_.find(path);
    if (cached != files_.end()) return &cached->second;
    struct stat st;
    if (stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode) || access(path.c_str(), R_OK) != 0) return nullptr;
    if (files_.size() >= kMaxConfigFiles) return ConfigError(path, "more than 256 included files");
    ASSIGN_OR_RETURN(std::vector<GitConfigEntry> entries,
                     ListConfig(scope_, scope_.homes.front(), {}, {"--file", path}, "/", path));
    return &files_.emplace(path, std::move(entries)).first->second;
  }

  const GitConfigScope& scope_;
  std::map<std::string, std::vector<GitConfigEntry>> files_;
  std::map<std::string, NamedPath> named_;
};

// Where `path` lies in the read-write shares `canon` (canonical; empty: not read-write): every
// share holding it, with the path below it. Symlinks outside the shares are followed, as git
// would; one inside a share is left for the caller's no-symlink lookup to refuse.
Result<std::vector<std::pair<size_t, std::string>>> Locate(std::string p, const std::vector<std::string>& canon) {
  for (int hop = 0; hop < 40; ++hop) {
    std::vector<std::pair<size_t, std::string>> found;
    for (size_t i = 0; i < canon.size(); ++i) {
      const std::string& s = canon[i];
      if (s.empty()) continue;
      if (p == s) found.push_back({i, ""});
      else if (s == "/") found.push_back({i, p.substr(1)});
      else if (p.size() > s.size() && p.compare(0, s.size(), s) == 0 && p[s.size()] == '/') found.push_back({i, p.substr(s.size() + 1)});
    }
    if (!found.empty()) return found;
    bool followed = false;
    for (size_t pos = 1; pos <= p.size() && !followed;) {
      size_t next = p.find('/', pos);
      if (next == std::string::npos) next = p.size();
      std::string prefix = p.substr(0, next);
      struct stat st;
      if (lstat(prefix.c_str(), &st) != 0) return found;  // missing outside every share
      if (S_ISLNK(st.st_mode)) {
        char target[PATH_MAX];
        ssize_t n = readlink(prefix.c_str(), target, sizeof(target) - 1);
        if (n <= 0) return found;
        std::string t(target, static_cast<size_t>(n));
        p = NormalizeAbsolute((t[0] == '/' ? t : ParentDir(prefix) + "/" + t) + p.substr(next));
        followed = true;
      }
      pos = next + 1;
    }
    if (!followed) return found;
  }
  return Error(ErrorCode::kFailedPrecondition, "too many symlinks resolving " + p);
}

// A pinned directory's files must have no other name the guest could write them through.
Status CheckNoHardLinks(int dir_path_fd, const std::string& share, const std::string& rel) {
  int fd = openat(dir_path_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  DIR* d = fd >= 0 ? fdopendir(fd) : nullptr;
  if (!d) {
    if (fd >= 0) close(fd);
    return ErrnoError("read " + share + "/" + rel, errno);
  }
  Status status = OkStatus();
  size_t n = 0;
  while (dirent* e = readdir(d)) {
    struct stat st;
    if (++n > kMaxPinnedChildren) {
      status = RefuseShare(share, rel + " (named by host git's configuration) holds over 4096 entries");
      break;
    }
    if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode) && st.st_nlink > 1) {
      status = RefuseShare(share, rel + "/" + e->d_name + " (named by host git's configuration) has other hard "
                                                          "links: the guest could write it through them");
      break;
    }
  }
  closedir(d);
  return status;
}

// One path below a read-write share: pinned read-only if it exists, guarded either way.
Status ProtectOne(const GitConfigShare& share, const std::string& rel, bool bare, GitConfigProtection* out) {
  int fd = OpenBeneath(share.fd, rel.c_str());
  if (fd < 0) {
    if (errno != ENOENT && errno != ENOTDIR) {
      return RefuseShare(share.host_path, rel + " (named by host git's configuration) is not reached without symlinks");
    }
    out->guarded.push_back(rel);
    return OkStatus();
  }
  struct stat st;
  int r = fstat(fd, &st);
  int err = errno;
  Status status = OkStatus();
  if (r != 0) {
    status = ErrnoError("stat " + share.host_path + "/" + rel, err);
  } else if (bare && !S_ISREG(st.st_mode)) {
    // A bare argument word naming a directory or other file: not a script.
  } else if (S_ISREG(st.st_mode) || S_ISDIR(st.st_mode)) {
    if (S_ISREG(st.st_mode) && st.st_nlink > 1) {
      status = RefuseShare(share.host_path, rel + " (named by host git's configuration) has other hard links: "
                                                  "the guest could write it through them");
    } else if (S_ISDIR(st.st_mode)) {
      status = CheckNoHardLinks(fd, share.host_path, rel);
    }
    if (status.ok()) {
      out->targets.push_back({rel, S_ISDIR(st.st_mode), true});
      out->guarded.push_back(rel);
    }
  } else {
    status = RefuseShare(share.host_path, rel + " (named by host git's configuration) is " +
                                              (S_ISLNK(st.st_mode) ? "a symlink" : "neither a file nor a directory"));
  }
  close(fd);
  return status;
}

// Already read-only: a read-only bind of the walk's, or below one.
bool Covered(const ShareScan& scan, const std::string& rel) {
  for (const ShareMountTarget& t : scan.targets) {
    if (!t.read_only) continue;
    if (rel == t.relative || (t.directory && rel.rfind(t.relative + "/", 0) == 0)) return true;
  }
  return false;
}

}  // namespace

std::optional<std::string> FindHostGit() {
  for (const char* git : {"/usr/local/bin/git", "/usr/bin/git", "/bin/git"}) {
    struct stat st;
    if (stat(git, &st) == 0 && S_ISREG(st.st_mode) && access(git, X_OK) == 0) return std::string(git);
  }
  return std::nullopt;
}

GitConfigScope HostGitScope(const std::string& git, const std::vector<uid_t>& owners) {
  GitConfigScope scope;
  scope.git = git;
  auto add = [&](const std::string& home, const std::string& xdg) {
    std::pair<std::string, std::string> h{home, xdg};
    if (std::find(scope.homes.begin(), scope.homes.end(), h) == scope.homes.end()) scope.homes.push_back(h);
  };
  const char* env_home = std::getenv("HOME");
  const char* env_xdg = std::getenv("XDG_CONFIG_HOME");
  if (env_home && env_home[0] == '/') add(env_home, env_xdg && env_xdg[0] == '/' ? env_xdg : "");
  if (auto h = PasswdHome(getuid())) add(*h, "");
  for (uid_t owner : owners) {
    if (auto h = PasswdHome(owner)) add(*h, "");
  }
  return scope;
}

Result<std::vector<NamedPath>> ReadGitConfigPaths(const std::vector<GitRepository>& repos,
                                                  const GitConfigScope& scope) {
  GitConfigScope s = scope;
  if (s.homes.empty()) s.homes.push_back({"/nonexistent", ""});  // system configuration only
  std::vector<std::string> homes;
  for (const auto& [home, xdg] : s.homes) homes.push_back(home);
  ConfigReader reader(s);
  // The system and global configuration of each home, and the global files' own paths (a share
  // holding a home must not gain one).
  std::vector<GitConfigEntry> global;
  for (const auto& home : s.homes) {
    ASSIGN_OR_RETURN(std::vector<GitConfigEntry> entries, ListConfig(s, home, {}, {}, "/", "home " + home.first));
    global.insert(global.end(), entries.begin(), entries.end());
    reader.Add({NormalizeAbsolute(home.first + "/.gitconfig"), true, false});
    std::string xdg = home.second.empty() ? home.first + "/.config" : home.second;
    reader.Add({NormalizeAbsolute(xdg + "/git/config"), true, false});
  }
  RETURN_IF_ERROR(reader.Process(global, GitPathBase{"", homes, UserHome}));
  for (const GitRepository& repo : repos) {
    bool not_a_repository = false;
    ASSIGN_OR_RETURN(std::vector<GitConfigEntry> entries,
                     ListConfig(s, s.homes.front(), {"--git-dir=" + repo.git_dir}, {}, repo.work_dir, repo.git_dir,
                                &not_a_repository));
    if (not_a_repository) continue;
    GitPathBase base{BaseOf(repo, entries), homes, UserHome};
    entries.insert(entries.end(), global.begin(), global.end());
    RETURN_IF_ERROR(reader.Process(std::move(entries), base));
  }
  return reader.Take();
}

Result<std::vector<GitConfigProtection>> ProtectGitConfigPaths(const std::vector<GitConfigShare>& shares,
                                                               const GitConfigScope& scope) {
  std::vector<GitConfigProtection> out(shares.size());
  std::vector<std::string> canon(shares.size());
  std::vector<GitRepository> repos;
  auto add_repo = [&](const std::string& git_dir, const std::string& work_dir) {
    GitRepository r{git_dir, work_dir};
    for (const GitRepository& o : repos) {
      if (o.git_dir == r.git_dir && o.work_dir == r.work_dir) return;
    }
    repos.push_back(r);
  };
  for (size_t i = 0; i < shares.size(); ++i) {
    const GitConfigShare& share = shares[i];
    if (share.read_only || !share.scan) continue;
    char real[PATH_MAX];
    if (!realpath(share.host_path.c_str(), real)) return ErrnoError("resolve " + share.host_path, errno);
    canon[i] = real;
    for (const std::string& g : share.scan->git_dirs) {
      std::string git_dir = JoinBelow(canon[i], g);
      size_t slash = g.rfind('/');
      std::string last = slash == std::string::npos ? g : g.substr(slash + 1);
      add_repo(git_dir, EqualsFold(last, ".git") ? ParentDir(git_dir) : git_dir);
    }
    for (const std::string& f : share.scan->gitfiles) add_repo(JoinBelow(canon[i], f), ParentDir(JoinBelow(canon[i], f)));
    // The repository the share lies in, if any: the nearest `.git` above it.
    for (std::string dir = ParentDir(canon[i]); canon[i] != "/"; dir = ParentDir(dir)) {
      struct stat st;
      if (lstat((dir == "/" ? "/.git" : dir + "/.git").c_str(), &st) == 0) {
        add_repo(dir == "/" ? "/.git" : dir + "/.git", dir);
        break;
      }
      if (dir == "/") break;
    }
  }
  if (std::all_of(canon.begin(), canon.end(), [](const std::string& c) { return c.empty(); })) return out;
  if (scope.git.empty()) {
    return Error(ErrorCode::kFailedPrecondition,
                 "cannot read host git's configuration: no git in /usr/local/bin, /usr/bin or /bin "
                 "(cloister reads it to keep the guest from writing what host git runs)",
                 "install git on the host, or share the folder read-only (`-v DIR:GUEST:ro`)");
  }
  ASSIGN_OR_RETURN(std::vector<NamedPath> named, ReadGitConfigPaths(repos, scope));
  for (const NamedPath& p : named) {
    ASSIGN_OR_RETURN(auto places, Locate(p.path, canon));
    for (const auto& [i, rel] : places) {
      if (rel.empty()) {
        return RefuseShare(shares[i].host_path, "host git's configuration names the folder itself (" + p.path +
                                                    "): a hook directory, configuration file or program the guest could write");
      }
      if (Covered(*shares[i].scan, rel)) continue;
      RETURN_IF_ERROR(ProtectOne(shares[i], rel, p.bare, &out[i]));
    }
  }
  for (GitConfigProtection& p : out) {
    std::sort(p.guarded.begin(), p.guarded.end());
    p.guarded.erase(std::unique(p.guarded.begin(), p.guarded.end()), p.guarded.end());
  }
  return out;
}

}  // namespace cloister::vm
