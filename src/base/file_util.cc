#include "base/file_util.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace cloister {

Status WriteAll(int fd, std::string_view data, const std::string& what) {
  size_t off = 0;
  while (off < data.size()) {
    ssize_t n = write(fd, data.data() + off, data.size() - off);
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoError("write " + what, errno);
    }
    off += static_cast<size_t>(n);
  }
  return OkStatus();
}

std::string DrainFdBounded(int fd, size_t max_bytes) {
  std::string out;
  char buf[8192];
  while (true) {
    ssize_t n = read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    size_t room = max_bytes - std::min(max_bytes, out.size());
    out.append(buf, std::min(room, static_cast<size_t>(n)));
  }
  return out;
}

Result<std::string> ReadFileBounded(const std::string& path, size_t max_bytes, Follow follow) {
  int flags = O_RDONLY | O_CLOEXEC | (follow == Follow::kNoSymlinks ? O_NOFOLLOW : 0);
  int fd = open(path.c_str(), flags);
  if (fd < 0) {
    int e = errno;
    if (e == ENOENT) return Error(ErrorCode::kNotFound, path + " does not exist");
    return ErrnoError("open " + path, e);
  }
  std::string out;
  auto fail = [&](Error error) -> Result<std::string> {
    close(fd);
    if (!out.empty()) explicit_bzero(out.data(), out.size());
    return error;
  };
  char buf[16384];
  while (true) {
    ssize_t n = read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return fail(ErrnoError("read " + path, errno));
    if (n == 0) break;
    if (out.size() + static_cast<size_t>(n) > max_bytes) {
      explicit_bzero(buf, sizeof buf);
      return fail(Error(ErrorCode::kCorrupt,
                        path + " is larger than " + std::to_string(max_bytes) + " bytes"));
    }
    out.append(buf, static_cast<size_t>(n));
  }
  explicit_bzero(buf, sizeof buf);
  close(fd);
  return out;
}

Status WriteFile(const std::string& path, std::string_view content, mode_t mode) {
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
  if (fd < 0) return ErrnoError("create " + path, errno);
  Status st = WriteAll(fd, content, path);
  if (st.ok() && fchmod(fd, mode) != 0) st = ErrnoError("chmod " + path, errno);
  if (!st.ok()) {
    close(fd);
    return st;
  }
  if (close(fd) != 0) return ErrnoError("close " + path, errno);
  return OkStatus();
}

Status WriteFileAtomic(const std::string& path, std::string_view content, mode_t mode) {
  std::string tmp = path + ".tmp." + std::to_string(getpid());
  int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, mode);
  if (fd < 0) return ErrnoError("create " + tmp, errno);
  auto fail = [&](Error e) {
    close(fd);
    unlink(tmp.c_str());
    return e;
  };
  if (Status st = WriteAll(fd, content, tmp); !st.ok()) return fail(st.error());
  if (fchmod(fd, mode) != 0) return fail(ErrnoError("chmod " + tmp, errno));
  if (fsync(fd) != 0) return fail(ErrnoError("fsync " + tmp, errno));
  close(fd);
  if (rename(tmp.c_str(), path.c_str()) != 0) {
    int e = errno;
    unlink(tmp.c_str());
    return ErrnoError("rename " + path, e);
  }
  size_t slash = path.rfind('/');
  std::string dir = slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
  int dfd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    fsync(dfd);
    close(dfd);
  }
  return OkStatus();
}

Status SendAllWithFd(int sock, std::string_view data, int pass_fd, const std::string& what) {
  size_t off = 0;
  while (off < data.size()) {
    iovec iov{const_cast<char*>(data.data() + off), data.size() - off};
    msghdr mh{};
    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))];
    if (pass_fd >= 0 && off == 0) {
      std::memset(control, 0, sizeof(control));
      mh.msg_control = control;
      mh.msg_controllen = sizeof(control);
      cmsghdr* cm = CMSG_FIRSTHDR(&mh);
      cm->cmsg_level = SOL_SOCKET;
      cm->cmsg_type = SCM_RIGHTS;
      cm->cmsg_len = CMSG_LEN(sizeof(int));
      std::memcpy(CMSG_DATA(cm), &pass_fd, sizeof(int));
    }
    ssize_t w = sendmsg(sock, &mh, MSG_NOSIGNAL);
    if (w < 0) {
      if (errno == EINTR) continue;
      return ErrnoError("send to " + what, errno);
    }
    off += static_cast<size_t>(w);
  }
  return OkStatus();
}

Result<FlockGuard> FlockGuard::Acquire(const std::string& path) {
  int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoError("open " + path, errno);
  while (flock(fd, LOCK_EX) != 0) {
    if (errno != EINTR) {
      int e = errno;
      close(fd);
      return ErrnoError("flock " + path, e);
    }
  }
  return FlockGuard(fd);
}

FlockGuard::~FlockGuard() {
  if (fd_ >= 0) close(fd_);
}

}  // namespace cloister
