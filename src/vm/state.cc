#include "vm/state.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <string>

#include "base/strings.h"
#include "vm/control.h"

namespace cloister::vm {

const char* VmStateName(VmState state) {
  switch (state) {
    case VmState::kStopped: return "stopped";
    case VmState::kBooting: return "booting";
    case VmState::kRunning: return "running";
    case VmState::kStopping: return "stopping";
    case VmState::kSuspending: return "suspending";
    case VmState::kSuspended: return "suspended";
    case VmState::kBroken: return "broken";
  }
  return "unknown";
}

namespace {

bool Exists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

// Reads the pid and whether the lock is held.
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
  return static_cast<pid_t>(std::stol(s));
}

}  // namespace

pid_t LivePid(const std::string& pid_path) {
  int fd = open(pid_path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  pid_t pid = LockHeld(fd) ? ReadPid(fd) : 0;
  close(fd);
  return pid;
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
      return Error(ErrorCode::kBusy, "another supervisor is running for this workspace");
    }
    return ErrnoError("lock " + path, err);
  }
  std::string pid = std::to_string(getpid()) + "\n";
  if (ftruncate(fd, 0) != 0 || pwrite(fd, pid.data(), pid.size(), 0) != static_cast<ssize_t>(pid.size())) {
    int err = errno;
    close(fd);
    return ErrnoError("write " + path, err);
  }
  return fd;
}

VmStatus DeriveStatus(const RunPaths& paths, std::chrono::milliseconds answer_timeout) {
  VmStatus status;
  int fd = open(paths.supervisor_pid.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    status.state = Exists(paths.suspend_state) ? VmState::kSuspended : VmState::kStopped;
    return status;
  }
  bool held = LockHeld(fd);
  status.supervisor_pid = ReadPid(fd);
  close(fd);
  if (!held) {
    status.state = VmState::kBroken;
    status.detail = "its supervisor (pid " + std::to_string(status.supervisor_pid) +
                    ") is gone; the VM is not running";
    status.hint = "`cloister stop " + paths.name + " --force` cleans up, or `cloister start " +
                  paths.name + "` starts it again (boot log: " + paths.console_log + ")";
    return status;
  }
  auto reply = ControlRequest(paths.supervisor_socket, {{"op", "status"}}, answer_timeout);
  if (!reply.ok()) {
    status.state = VmState::kBroken;
    status.detail = "its supervisor (pid " + std::to_string(status.supervisor_pid) +
                    ") does not answer: " + reply.error().message();
    status.hint = "`cloister stop " + paths.name + " --force` kills it";
    return status;
  }
  status.info = *reply;
  std::string state = JsonString(*reply, "state");
  status.detail = JsonString(*reply, "stage");
  if (state == "booting") status.state = VmState::kBooting;
  else if (state == "running") status.state = VmState::kRunning;
  else if (state == "stopping" || state == "rebooting" || state == "stopped") {
    status.state = VmState::kStopping;  // "stopped": QEMU is gone, the supervisor is exiting
  }
  else if (state == "suspending") status.state = VmState::kSuspending;
  else {
    status.state = VmState::kBroken;
    status.detail = "supervisor reports an unknown state";
    status.hint = "`cloister stop " + paths.name + " --force`";
  }
  return status;
}

}  // namespace cloister::vm
