#include "transfer/beneath.h"

#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>

#include "base/strings.h"
#include "base/terminal_text.h"

namespace cloister::transfer {
namespace {

constexpr uint64_t kResolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;

// One component `name` of the directory `dir`, never through a symlink (glibc 2.36 has no openat2
// wrapper). O_NOFOLLOW with O_DIRECTORY: a symlink as the last component is ENOTDIR.
int OpenBeneath(int dir, const std::string& name, int flags) {
  struct open_how how {};
  how.flags = static_cast<uint64_t>(flags | O_CLOEXEC | O_NOFOLLOW);
  how.resolve = kResolve;
  long r;
  do {
    r = syscall(SYS_openat2, dir, name.c_str(), &how, sizeof how);
  } while (r < 0 && errno == EINTR);
  return static_cast<int>(r);
}

std::string Shown(const std::vector<std::string>& path, size_t n) {
  std::vector<std::string> head(path.begin(), path.begin() + static_cast<long>(std::min(n, path.size())));
  return TerminalSafe(Join(head, "/"));
}

Error OpenError(const std::vector<std::string>& path, size_t n, int err) {
  if (err == ELOOP || err == ENOTDIR || err == EXDEV) {
    // SECURITY: the copy never goes through a symlink, whoever made it and whenever.
    return Error(ErrorCode::kPermissionDenied,
                 "'" + Shown(path, n) + "' in the destination is not a directory (a symlink, or "
                 "changed while the copy ran): nothing is written through it",
                 "nothing after this entry was copied; if the destination is in a share the "
                 "workspace writes, the workspace changed it (treat its files as untrusted)");
  }
  if (err == ENOSYS) {
    return Error(ErrorCode::kUnavailable, "this kernel has no openat2 (Linux 5.6 or later)",
                 "cloister cp extracts only through openat2; copy into the workspace's share "
                 "with tools of your own instead");
  }
  return ErrnoError("open '" + Shown(path, n) + "' in the destination", err);
}

std::string TempName() {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  char buf[32];
  std::snprintf(buf, sizeof buf, ".cloister-cp-%016llx", static_cast<unsigned long long>(rng()));
  return buf;
}

}  // namespace

Result<BeneathWriter> BeneathWriter::Open(const std::string& dest_dir) {
  int fd = open(dest_dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return ErrnoError("open " + dest_dir, errno);
  return BeneathWriter(fd);
}

BeneathWriter::BeneathWriter(BeneathWriter&& o) noexcept
    : root_(o.root_), parent_(o.parent_), parent_path_(std::move(o.parent_path_)),
      dirs_(std::move(o.dirs_)) {
  o.root_ = o.parent_ = -1;
}

BeneathWriter::~BeneathWriter() {
  if (parent_ >= 0 && parent_ != root_) close(parent_);
  if (root_ >= 0) close(root_);
}

Result<int> BeneathWriter::OpenDir(const std::vector<std::string>& path, size_t n, int last_flags,
                                   bool make) {
  int cur = root_;
  for (size_t i = 0; i < n; ++i) {
    int flags = i + 1 == n ? last_flags : O_PATH | O_DIRECTORY;
    int fd = OpenBeneath(cur, path[i], flags);
    if (fd < 0 && errno == ENOENT && make) {
      if (mkdirat(cur, path[i].c_str(), 0777) != 0 && errno != EEXIST) {
        int err = errno;
        if (cur != root_) close(cur);
        return ErrnoError("make '" + Shown(path, i + 1) + "' in the destination", err);
      }
      fd = OpenBeneath(cur, path[i], flags);
    }
    int err = errno;
    if (cur != root_) close(cur);
    if (fd < 0) return OpenError(path, i + 1, err);
    cur = fd;
  }
  if (cur == root_ && n == 0 && last_flags != (O_PATH | O_DIRECTORY)) {
    int fd = OpenBeneath(root_, ".", last_flags);  // the destination itself, reopened
    if (fd < 0) return OpenError(path, 0, errno);
    return fd;
  }
  return cur;
}

Result<int> BeneathWriter::Parent(const std::vector<std::string>& path) {
  if (path.empty()) return Error(ErrorCode::kInvalidArgument, "an entry without a name");
  std::vector<std::string> want(path.begin(), path.end() - 1);
  if (parent_ >= 0 && want == parent_path_) return parent_;
  if (parent_ >= 0 && parent_ != root_) close(parent_);
  parent_ = -1;
  parent_path_.clear();
  ASSIGN_OR_RETURN(int fd, OpenDir(want, want.size(), O_PATH | O_DIRECTORY, /*make=*/true));
  parent_ = fd;
  parent_path_ = std::move(want);
  return fd;
}

Status BeneathWriter::MakeDirectory(const std::vector<std::string>& path, mode_t mode,
                                    int64_t mtime) {
  ASSIGN_OR_RETURN(int parent, Parent(path));
  const char* leaf = path.back().c_str();
  if (mkdirat(parent, leaf, 0700) != 0) {
    if (errno != EEXIST) return ErrnoError("make '" + Shown(path, path.size()) + "'", errno);
    struct stat st;
    if (fstatat(parent, leaf, &st, AT_SYMLINK_NOFOLLOW) != 0) {
      return ErrnoError("stat '" + Shown(path, path.size()) + "'", errno);
    }
    // A file or symlink where the archive has a directory is replaced (tar's way), never followed.
    if (!S_ISDIR(st.st_mode) && (unlinkat(parent, leaf, 0) != 0 || mkdirat(parent, leaf, 0700) != 0)) {
      return ErrnoError("replace '" + Shown(path, path.size()) + "' by a directory", errno);
    }
  }
  dirs_.push_back({path, mode, mtime});
  return OkStatus();
}

Status BeneathWriter::WriteFile(const std::vector<std::string>& path, mode_t mode, int64_t mtime,
                                const std::function<Status(int fd)>& fill) {
  ASSIGN_OR_RETURN(int parent, Parent(path));
  std::string tmp;
  int fd = -1;
  for (int i = 0; i < 16 && fd < 0; ++i) {
    tmp = TempName();
    fd = openat(parent, tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0 && errno != EEXIST) return ErrnoError("create a file in the destination", errno);
  }
  if (fd < 0) return Error(ErrorCode::kAlreadyExists, "no free temporary name in the destination");
  Status st = fill(fd);
  const struct timespec ts[2] = {{0, UTIME_NOW}, {static_cast<time_t>(mtime), 0}};
  if (st.ok() && fchmod(fd, mode & 0777) != 0) st = ErrnoError("chmod", errno);
  if (st.ok() && futimens(fd, ts) != 0) st = ErrnoError("set the mtime", errno);
  if (close(fd) != 0 && st.ok()) st = ErrnoError("write '" + Shown(path, path.size()) + "'", errno);
  if (st.ok() && renameat(parent, tmp.c_str(), parent, path.back().c_str()) != 0) {
    st = ErrnoError("put '" + Shown(path, path.size()) + "' in place", errno);
  }
  if (!st.ok()) unlinkat(parent, tmp.c_str(), 0);
  return st;
}

Status BeneathWriter::MakeSymlink(const std::vector<std::string>& path, const std::string& target,
                                  int64_t mtime) {
  ASSIGN_OR_RETURN(int parent, Parent(path));
  std::string tmp;
  bool made = false;
  for (int i = 0; i < 16 && !made; ++i) {
    tmp = TempName();
    made = symlinkat(target.c_str(), parent, tmp.c_str()) == 0;
    if (!made && errno != EEXIST) return ErrnoError("make a symlink in the destination", errno);
  }
  if (!made) return Error(ErrorCode::kAlreadyExists, "no free temporary name in the destination");
  const struct timespec ts[2] = {{0, UTIME_NOW}, {static_cast<time_t>(mtime), 0}};
  Status st = OkStatus();
  if (utimensat(parent, tmp.c_str(), ts, AT_SYMLINK_NOFOLLOW) != 0) st = ErrnoError("utimensat", errno);
  if (st.ok() && renameat(parent, tmp.c_str(), parent, path.back().c_str()) != 0) {
    st = ErrnoError("put '" + Shown(path, path.size()) + "' in place", errno);
  }
  if (!st.ok()) unlinkat(parent, tmp.c_str(), 0);
  return st;
}

Status BeneathWriter::MakeHardLink(const std::vector<std::string>& path,
                                   const std::vector<std::string>& target) {
  if (target.empty()) return Error(ErrorCode::kInvalidArgument, "a hard link without a target");
  ASSIGN_OR_RETURN(int tdir, OpenDir(target, target.size() - 1, O_PATH | O_DIRECTORY, false));
  Result<int> parent = Parent(path);
  if (!parent.ok()) {
    if (tdir != root_) close(tdir);
    return parent.error();
  }
  std::string tmp;
  bool made = false;
  int err = 0;
  for (int i = 0; i < 16 && !made; ++i) {
    tmp = TempName();
    // No AT_SYMLINK_FOLLOW: a symlink at the target is linked as itself, never followed.
    made = linkat(tdir, target.back().c_str(), *parent, tmp.c_str(), 0) == 0;
    err = errno;
    if (!made && err != EEXIST) break;
  }
  if (tdir != root_) close(tdir);
  if (!made) return ErrnoError("hard-link '" + Shown(path, path.size()) + "'", err);
  if (renameat(*parent, tmp.c_str(), *parent, path.back().c_str()) != 0) {
    int e = errno;
    unlinkat(*parent, tmp.c_str(), 0);
    return ErrnoError("put '" + Shown(path, path.size()) + "' in place", e);
  }
  return OkStatus();
}

Status BeneathWriter::FinishDirectories() {
  Status first = OkStatus();
  // Deepest first: a directory's mtime is set after its subdirectories' were.
  for (auto it = dirs_.rbegin(); it != dirs_.rend(); ++it) {
    auto fd = OpenDir(it->path, it->path.size(), O_RDONLY | O_DIRECTORY, false);
    if (!fd.ok()) continue;  // no longer a directory of the destination: the guest's to keep
    const struct timespec ts[2] = {{0, UTIME_NOW}, {static_cast<time_t>(it->mtime), 0}};
    if ((fchmod(*fd, it->mode & 0777) != 0 || futimens(*fd, ts) != 0) && first.ok()) {
      first = ErrnoError("set the mode and mtime of '" + Shown(it->path, it->path.size()) + "'", errno);
    }
    close(*fd);
  }
  dirs_.clear();
  return first;
}

}  // namespace cloister::transfer
