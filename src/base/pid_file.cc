#include "base/pid_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

#include "base/strings.h"

namespace cloister {

namespace {

bool LockHeld(int fd) {
  struct flock fl{};
  fl.l_type = F_WRLCK;
  fl.l_whence = SEEK_SET;
  fl.l_start = 0;
  fl.l_len = 0;
  if (fcntl(fd, F_OFD_GETLK, &fl) != 0) return false;
  return fl.l_type != F_UNLCK;
}

pid_t ReadPid(int fd) {
  char buf[32] = {0};
  ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
  if (n <= 0) return 0;
  std::string s = Trim(std::string(buf, static_cast<size_t>(n)));
  if (s.empty() || s.size() > 10 || s.find_first_not_of("0123456789") != std::string::npos) return 0;
  long v = std::stol(s);
  return v > 0 && v <= 0x7fffffff ? static_cast<pid_t>(v) : 0;
}

}  // namespace

PidFileState ReadPidFile(const std::string& path) {
  PidFileState st;
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    st.exists = errno != ENOENT && errno != ENOTDIR;
    return st;
  }
  st.exists = true;
  st.held = LockHeld(fd);
  st.pid = ReadPid(fd);
  close(fd);
  return st;
}

Result<int> ClaimPidFile(const std::string& path) {
  int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return ErrnoError("open " + path, errno);
  struct flock fl{};
  fl.l_type = F_WRLCK;
  fl.l_whence = SEEK_SET;
  if (fcntl(fd, F_OFD_SETLK, &fl) != 0) {
    int err = errno;
    close(fd);
    if (err == EAGAIN || err == EACCES) {
      return Error(ErrorCode::kBusy, "another process holds " + path);
    }
    return ErrnoError("lock " + path, err);
  }
  std::string pid = std::to_string(getpid()) + "\n";
  if (ftruncate(fd, 0) != 0 ||
      pwrite(fd, pid.data(), pid.size(), 0) != static_cast<ssize_t>(pid.size())) {
    int err = errno;
    close(fd);
    return ErrnoError("write " + path, err);
  }
  return fd;
}

}  // namespace cloister
