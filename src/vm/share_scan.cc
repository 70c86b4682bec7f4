#include "vm/share_scan.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>

#include "vm/share_policy.h"

namespace cloister::vm {

int OpenBeneath(int root, const char* rel) {
  struct open_how how;
  memset(&how, 0, sizeof(how));
  how.flags = O_PATH | O_CLOEXEC | O_NOFOLLOW;
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
  return static_cast<int>(syscall(SYS_openat2, root, *rel ? rel : ".", &how, sizeof(how)));
}

Error RefuseShare(const std::string& share, const std::string& what) {
  return Error(ErrorCode::kFailedPrecondition, "shared folder " + share + ": " + what,
               "the guest may have planted it: inspect and fix it on the host, or share the folder "
               "read-only (`-v DIR:GUEST:ro`)");
}

namespace {

constexpr size_t kMaxGitDirs = 512;
constexpr size_t kMaxPath = 4000;  // below PATH_MAX with the share's own path in front

std::string Join(const std::string& dir, const std::string& name) {
  return dir.empty() ? name : dir + "/" + name;
}

// Walks one share. Every lookup goes through an fd of a directory reached without symlinks.
class Scanner {
 public:
  Scanner(const std::string& share, int share_fd) : share_(share), share_fd_(share_fd) {}

  // Depth first, each directory opened from its parent's fd (no path walked again from the top;
  // open fds stay within the depth: a pending directory holds its parent's).
  Status Walk() {
    int top = openat(share_fd_, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (top < 0) return ErrnoError("open " + share_, errno);
    struct Pending {
      std::shared_ptr<DirFd> parent;
      std::string name, rel;
    };
    std::vector<Pending> pending;
    std::shared_ptr<DirFd> root = std::make_shared<DirFd>(top);
    pending.push_back({nullptr, "", ""});
    while (!pending.empty()) {
      Pending p = std::move(pending.back());
      pending.pop_back();
      std::shared_ptr<DirFd> dir = root;
      if (p.parent) {
        int fd = openat(p.parent->fd, p.name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0) return RefuseShare(share_, p.rel + " changed while it was checked");
        dir = std::make_shared<DirFd>(fd);
      }
      ASSIGN_OR_RETURN(std::vector<Entry> entries, List(dir->fd, p.rel));
      if (LooksLikeGitDir(entries)) {
        RETURN_IF_ERROR(Protect(p.rel, 0));
        continue;
      }
      for (const Entry& e : entries) {
        std::string rel = Join(p.rel, e.name);
        if (EqualsFold(e.name, ".git")) {
          if (S_ISDIR(e.mode)) {
            RETURN_IF_ERROR(Protect(rel, 0));
          } else if (S_ISREG(e.mode)) {
            Add(rel, false, true);  // a gitdir: redirect, read-only
            scan_.gitfiles.push_back(rel);
          } else {
            return RefuseShare(share_, rel + " is neither a directory nor a regular file");
          }
        } else if (S_ISDIR(e.mode)) {
          if (rel.size() > kMaxPath) return RefuseShare(share_, rel.substr(0, 200) + "...: path too long to check");
          pending.push_back({dir, e.name, std::move(rel)});
        }
      }
    }
    return OkStatus();
  }

  ShareScan Take() { return std::move(scan_); }

 private:
  struct Entry {
    std::string name;
    mode_t mode;
  };

  static bool Has(const std::vector<Entry>& entries, const char* name) {
    return std::any_of(entries.begin(), entries.end(), [&](const Entry& e) { return e.name == name; });
  }
  // What git's is_git_directory() accepts: HEAD, and objects/refs or a commondir beside it.
  static bool LooksLikeGitDir(const std::vector<Entry>& entries) {
    return Has(entries, "HEAD") && (Has(entries, "objects") || Has(entries, "refs") || Has(entries, "commondir"));
  }

  struct DirFd {
    int fd;
    explicit DirFd(int f) : fd(f) {}
    ~DirFd() { close(fd); }
  };

  // The entries of the directory `fd` (`dir` in messages) with their types (lstat).
  Result<std::vector<Entry>> List(int fd, const std::string& dir) {
    int copy = dup(fd);
    DIR* d = copy >= 0 ? fdopendir(copy) : nullptr;
    if (!d) {
      int err = errno;
      if (copy >= 0) close(copy);
      return ErrnoError("read " + share_ + "/" + dir, err);
    }
    std::vector<Entry> out;
    while (dirent* e = readdir(d)) {
      const char* n = e->d_name;
      if (n[0] == '.' && (n[1] == 0 || (n[1] == '.' && n[2] == 0))) continue;
      mode_t mode = 0;
      switch (e->d_type) {
        case DT_DIR: mode = S_IFDIR; break;
        case DT_REG: mode = S_IFREG; break;
        case DT_LNK: mode = S_IFLNK; break;
        default: {
          struct stat st;
          if (fstatat(fd, n, &st, AT_SYMLINK_NOFOLLOW) == 0) mode = st.st_mode & S_IFMT;
        }
      }
      out.push_back({n, mode});
    }
    closedir(d);
    return out;
  }

  // The entries of `dir` (below the share, reached without symlinks), sorted by name.
  Result<std::vector<Entry>> List(const std::string& dir) {
    int path = OpenBeneath(share_fd_, dir.c_str());
    if (path < 0) return RefuseShare(share_, (dir.empty() ? "." : dir) + " is not a directory reached without symlinks");
    int fd = openat(path, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    int err = errno;
    close(path);
    if (fd < 0) return ErrnoError("open " + share_ + "/" + dir, err);
    auto out = List(fd, dir);
    close(fd);
    if (out.ok()) {
      std::sort(out->begin(), out->end(), [](const Entry& a, const Entry& b) { return a.name < b.name; });
    }
    return out;
  }

  // The type of `rel` (lstat), or 0 when it does not exist.
  Result<mode_t> TypeOf(const std::string& rel) {
    int fd = OpenBeneath(share_fd_, rel.c_str());
    if (fd < 0) {
      if (errno == ENOENT) return static_cast<mode_t>(0);
      return RefuseShare(share_, rel + " is not reached without symlinks");
    }
    struct stat st;
    int r = fstat(fd, &st);
    int err = errno;
    close(fd);
    if (r != 0) return ErrnoError("stat " + share_ + "/" + rel, err);
    return static_cast<mode_t>(st.st_mode & S_IFMT);
  }

  // Post-order: what is inside a git dir is mounted before its pin, which clones it.
  Status Protect(const std::string& gitdir, int depth) {
    if (depth > 4) return RefuseShare(share_, gitdir + ": git dirs nested deeper than 4 levels");
    if (scan_.git_dirs.size() >= kMaxGitDirs) return RefuseShare(share_, "more than 512 git dirs to protect");
    scan_.git_dirs.push_back(gitdir);
    for (const char* f : {"config", "config.worktree", "commondir"}) {
      std::string rel = Join(gitdir, f);
      ASSIGN_OR_RETURN(mode_t type, TypeOf(rel));
      if (type == 0) continue;  // the share guard refuses making it
      if (type != S_IFREG) return RefuseShare(share_, rel + " is not a regular file");
      Add(rel, false, true);
    }
    for (const char* d : {"hooks", "info", "modules", "worktrees"}) {
      std::string rel = Join(gitdir, d);
      ASSIGN_OR_RETURN(mode_t type, TypeOf(rel));
      if (type == 0) continue;
      if (type != S_IFDIR) return RefuseShare(share_, rel + " is not a directory");
      if (std::string(d) == "modules" || std::string(d) == "worktrees") {
        RETURN_IF_ERROR(ScanGitDirs(rel, depth + 1));
      }
      Add(rel, true, true);
    }
    if (!gitdir.empty()) Add(gitdir, true, false);  // the pin (the share itself is a mount already)
    return OkStatus();
  }

  // The git dirs below `dir` inside a git dir's modules/ or worktrees/ (a submodule named a/b is
  // modules/a/b): directories holding a HEAD.
  Status ScanGitDirs(const std::string& dir, int depth) {
    if (depth > 4) return OkStatus();
    ASSIGN_OR_RETURN(std::vector<Entry> entries, List(dir));
    for (const Entry& e : entries) {
      if (!S_ISDIR(e.mode)) continue;  // covered by the read-only parent
      std::string child = Join(dir, e.name);
      ASSIGN_OR_RETURN(mode_t head, TypeOf(child + "/HEAD"));
      if (head != 0) {
        RETURN_IF_ERROR(Protect(child, depth));
      } else {
        RETURN_IF_ERROR(ScanGitDirs(child, depth + 1));
      }
    }
    return OkStatus();
  }

  void Add(const std::string& rel, bool dir, bool ro) { scan_.targets.push_back({rel, dir, ro}); }

  std::string share_;
  int share_fd_;
  ShareScan scan_;
};

}  // namespace

Result<ShareScan> ScanShare(const std::string& share, int share_fd) {
  Scanner scanner(share, share_fd);
  RETURN_IF_ERROR(scanner.Walk());
  return scanner.Take();
}

}  // namespace cloister::vm
