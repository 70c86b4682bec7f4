#include "store/env.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "base/strings.h"
#include "store/layout.h"

namespace cloister {
namespace {

class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  ~Fd() { if (fd_ >= 0) close(fd_); }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  int release() { int f = fd_; fd_ = -1; return f; }

 private:
  int fd_;
};

class PosixFileLock : public FileLock {
 public:
  explicit PosixFileLock(int fd) : fd_(fd) {}
  ~PosixFileLock() override { close(fd_); }  // closing drops the flock

 private:
  int fd_;
};

Status WriteAll(int fd, const std::string& data, const std::string& path) {
  size_t off = 0;
  while (off < data.size()) {
    ssize_t w = write(fd, data.data() + off, data.size() - off);
    if (w < 0) {
      if (errno == EINTR) continue;
      return ErrnoError("write " + path, errno);
    }
    off += static_cast<size_t>(w);
  }
  return OkStatus();
}

// The body of PosixEnv::CopyFile (which removes `to` when this fails).
Result<Env::CopyMethod> CopyFileOnce(const std::string& from, const std::string& to,
                                     const std::function<void(uint64_t)>& progress) {
  Fd src(open(from.c_str(), O_RDONLY | O_CLOEXEC));
  if (src.get() < 0) return ErrnoError("open " + from, errno);
  struct stat st;
  if (fstat(src.get(), &st) != 0) return ErrnoError("stat " + from, errno);
  if (!S_ISREG(st.st_mode)) return Error(ErrorCode::kInvalidArgument, from + " is not a file");
  Fd dst(open(to.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
  if (dst.get() < 0) return ErrnoError("create " + to, errno);
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (ioctl(dst.get(), FICLONE, src.get()) == 0) {
    if (progress) progress(size);
    if (close(dst.release()) != 0) return ErrnoError("close " + to, errno);
    return Env::CopyMethod::kReflink;
  }
  if (ftruncate(dst.get(), static_cast<off_t>(size)) != 0) return ErrnoError("truncate " + to, errno);
  constexpr uint64_t kPiece = 16ull << 20;  // progress granularity
  uint64_t done = 0;
  off_t pos = 0;
  while (static_cast<uint64_t>(pos) < size) {
    off_t data = lseek(src.get(), pos, SEEK_DATA);
    if (data < 0) {
      if (errno == ENXIO) break;  // only a hole is left
      return ErrnoError("seek " + from, errno);
    }
    off_t hole = lseek(src.get(), data, SEEK_HOLE);
    if (hole < 0) return ErrnoError("seek " + from, errno);
    for (off_t at = data; at < hole;) {
      off_t in = at, out = at;
      size_t want = static_cast<size_t>(std::min<uint64_t>(kPiece, static_cast<uint64_t>(hole - at)));
      ssize_t n = copy_file_range(src.get(), &in, dst.get(), &out, want, 0);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return ErrnoError("copy " + from + " to " + to, errno);
      if (n == 0) return Error(ErrorCode::kIo, from + " shrank while it was copied");
      at += n;
      done += static_cast<uint64_t>(n);
      if (progress) progress(done);
    }
    pos = hole;
  }
  if (fsync(dst.get()) != 0) return ErrnoError("fsync " + to, errno);
  if (close(dst.release()) != 0) return ErrnoError("close " + to, errno);
  return Env::CopyMethod::kSparse;
}

class PosixEnv : public Env {
 public:
  Result<std::string> ReadFile(const std::string& path, size_t max_bytes) override {
    Fd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (fd.get() < 0) return ErrnoError("open " + path, errno);
    std::string out;
    char buf[65536];
    while (true) {
      ssize_t r = read(fd.get(), buf, sizeof(buf));
      if (r < 0) {
        if (errno == EINTR) continue;
        return ErrnoError("read " + path, errno);
      }
      if (r == 0) break;
      out.append(buf, static_cast<size_t>(r));
      if (out.size() > max_bytes) {
        return Error(ErrorCode::kCorrupt, path + " is larger than " + std::to_string(max_bytes) +
                                              " bytes");
      }
    }
    return out;
  }

  Result<FileInfo> Stat(const std::string& path) override {
    struct stat st;
    FileInfo info;
    if (lstat(path.c_str(), &st) != 0) {
      if (errno == ENOENT || errno == ENOTDIR) return info;
      return ErrnoError("stat " + path, errno);
    }
    info.exists = true;
    info.is_dir = S_ISDIR(st.st_mode);
    info.is_regular = S_ISREG(st.st_mode);
    info.mode = st.st_mode & 07777;
    info.apparent = static_cast<uint64_t>(st.st_size);
    info.allocated = static_cast<uint64_t>(st.st_blocks) * 512;
    info.inode = st.st_ino;
    info.device = st.st_dev;
    info.nlink = st.st_nlink;
    info.mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
    return info;
  }

  Result<std::vector<std::string>> ListDir(const std::string& path) override {
    DIR* d = opendir(path.c_str());
    if (!d) return ErrnoError("opendir " + path, errno);
    std::vector<std::string> names;
    while (struct dirent* e = readdir(d)) {
      std::string n = e->d_name;
      if (n != "." && n != "..") names.push_back(n);
    }
    closedir(d);
    std::sort(names.begin(), names.end());
    return names;
  }

  Result<uint64_t> FreeSpace(const std::string& path) override {
    struct statvfs vfs;
    if (statvfs(path.c_str(), &vfs) != 0) return ErrnoError("statvfs " + path, errno);
    return static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize;
  }

  Status WriteFile(const std::string& path, const std::string& data, uint32_t mode) override {
    Fd fd(open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode));
    if (fd.get() < 0) return ErrnoError("create " + path, errno);
    RETURN_IF_ERROR(WriteAll(fd.get(), data, path));
    if (close(fd.release()) != 0) return ErrnoError("close " + path, errno);
    return OkStatus();
  }

  Status SyncFile(const std::string& path) override {
    Fd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (fd.get() < 0) return ErrnoError("open " + path, errno);
    if (fsync(fd.get()) != 0) return ErrnoError("fsync " + path, errno);
    return OkStatus();
  }

  Status SyncDir(const std::string& path) override {
    Fd fd(open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (fd.get() < 0) return ErrnoError("open " + path, errno);
    if (fsync(fd.get()) != 0 && errno != EINVAL) return ErrnoError("fsync " + path, errno);
    return OkStatus();
  }

  Status Rename(const std::string& from, const std::string& to, bool no_replace) override {
    int r = no_replace ? renameat2(AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(), RENAME_NOREPLACE)
                       : rename(from.c_str(), to.c_str());
    if (r != 0) {
      if (no_replace && errno == EEXIST) {
        return Error(ErrorCode::kAlreadyExists, to + " already exists");
      }
      return ErrnoError("rename " + from + " to " + to, errno);
    }
    return OkStatus();
  }

  Status Link(const std::string& from, const std::string& to) override {
    if (link(from.c_str(), to.c_str()) != 0) return ErrnoError("link " + from + " to " + to, errno);
    return OkStatus();
  }

  Status RemoveFile(const std::string& path) override {
    if (unlink(path.c_str()) != 0 && errno != ENOENT) return ErrnoError("unlink " + path, errno);
    return OkStatus();
  }

  Status RemoveDir(const std::string& path) override {
    if (rmdir(path.c_str()) != 0 && errno != ENOENT) return ErrnoError("rmdir " + path, errno);
    return OkStatus();
  }

  Status CreateDir(const std::string& path, uint32_t mode) override {
    if (mkdir(path.c_str(), mode) != 0) return ErrnoError("mkdir " + path, errno);
    return OkStatus();
  }

  Status Truncate(const std::string& path, uint64_t size) override {
    Fd fd(open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644));
    if (fd.get() < 0) return ErrnoError("create " + path, errno);
    if (ftruncate(fd.get(), static_cast<off_t>(size)) != 0) {
      return ErrnoError("truncate " + path, errno);
    }
    return OkStatus();
  }

  Status CloneFile(const std::string& from, const std::string& to) override {
    Fd src(open(from.c_str(), O_RDONLY | O_CLOEXEC));
    if (src.get() < 0) return ErrnoError("open " + from, errno);
    Fd dst(open(to.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
    if (dst.get() < 0) return ErrnoError("create " + to, errno);
    if (ioctl(dst.get(), FICLONE, src.get()) != 0) {
      int err = errno;
      unlink(to.c_str());
      if (err == EOPNOTSUPP || err == EXDEV || err == EINVAL || err == ENOTTY || err == ENOSYS) {
        return Error(ErrorCode::kUnavailable, "reflink (FICLONE) is not supported here: " +
                                                  std::string(strerror(err)));
      }
      return ErrnoError("FICLONE " + from + " to " + to, err);
    }
    if (close(dst.release()) != 0) return ErrnoError("close " + to, errno);
    return OkStatus();
  }

  Result<CopyMethod> CopyFile(const std::string& from, const std::string& to,
                              const std::function<void(uint64_t)>& progress) override {
    Result<CopyMethod> copied = CopyFileOnce(from, to, progress);
    if (!copied.ok()) unlink(to.c_str());
    return copied;
  }

  Result<RunOutput> RunTool(const std::vector<std::string>& argv,
                            const RunOptions& options) override {
    return RunProcess(argv, options);
  }

  Result<std::unique_ptr<FileLock>> LockFile(const std::string& path, bool wait) override {
    Fd fd(open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
    if (fd.get() < 0) return ErrnoError("open " + path, errno);
    while (flock(fd.get(), LOCK_EX | (wait ? 0 : LOCK_NB)) != 0) {
      if (errno == EINTR) continue;
      if (errno == EWOULDBLOCK) return Error(ErrorCode::kBusy, path + " is locked");
      return ErrnoError("flock " + path, errno);
    }
    return std::unique_ptr<FileLock>(new PosixFileLock(fd.release()));
  }
};

}  // namespace

Env* Env::Default() {
  static PosixEnv* env = new PosixEnv();
  return env;
}

Status Env::AtomicWriteFile(const std::string& path, const std::string& data, uint32_t mode) {
  std::string tmp = path + std::string(layout::kTempSuffix);
  RETURN_IF_ERROR(WriteFile(tmp, data, mode));
  RETURN_IF_ERROR(SyncFile(tmp));
  RETURN_IF_ERROR(Rename(tmp, path));
  return SyncDir(DirName(path));
}

Status Env::CreateDirs(const std::string& path, uint32_t mode) {
  ASSIGN_OR_RETURN(FileInfo info, Stat(path));
  if (info.exists) {
    if (info.is_dir) return OkStatus();
    return Error(ErrorCode::kFailedPrecondition, path + " exists and is not a directory");
  }
  std::string parent = DirName(path);
  if (parent != path) RETURN_IF_ERROR(CreateDirs(parent, mode));
  Status s = CreateDir(path, mode);
  if (!s.ok() && s.error().code() == ErrorCode::kAlreadyExists) return OkStatus();
  return s;
}

Status Env::RemoveAll(const std::string& path) {
  ASSIGN_OR_RETURN(FileInfo info, Stat(path));
  if (!info.exists) return OkStatus();
  if (!info.is_dir) return RemoveFile(path);
  ASSIGN_OR_RETURN(std::vector<std::string> names, ListDir(path));
  for (const std::string& n : names) RETURN_IF_ERROR(RemoveAll(JoinPath(path, n)));
  return RemoveDir(path);
}

Result<RunOutput> Env::RunToolChecked(const std::vector<std::string>& argv,
                                      const RunOptions& options) {
  ASSIGN_OR_RETURN(RunOutput out, RunTool(argv, options));
  if (out.timed_out) return Error(ErrorCode::kUnavailable, argv[0] + " timed out");
  if (!out.success()) {
    std::string last = Trim(out.err);
    size_t nl = last.rfind('\n');
    if (nl != std::string::npos) last = last.substr(nl + 1);
    std::string how = out.term_signal ? "killed by signal " + std::to_string(out.term_signal)
                                      : "exited with " + std::to_string(out.exit_code);
    bool full = out.err.find("No space left") != std::string::npos ||
                out.err.find("ENOSPC") != std::string::npos;
    if (full) {
      return Error(ErrorCode::kNoSpace, argv[0] + " " + how + ": no space left on device",
                   "free space on the store's filesystem");
    }
    return Error(ErrorCode::kIo, argv[0] + " " + how + (last.empty() ? "" : ": " + last));
  }
  return out;
}

bool Env::Exists(const std::string& path) {
  Result<FileInfo> info = Stat(path);
  return info.ok() && info->exists;
}

std::string DirName(const std::string& path) {
  size_t pos = path.find_last_of('/');
  if (pos == std::string::npos) return ".";
  if (pos == 0) return "/";
  return path.substr(0, pos);
}

std::string BaseName(const std::string& path) {
  size_t pos = path.find_last_of('/');
  return pos == std::string::npos ? path : path.substr(pos + 1);
}

std::string JoinPath(const std::string& a, std::string_view b) {
  if (a.empty()) return std::string(b);
  if (a.back() == '/') return a + std::string(b);
  return a + "/" + std::string(b);
}

}  // namespace cloister
