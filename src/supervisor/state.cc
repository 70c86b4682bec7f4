#include "supervisor/state.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <string>

#include "base/pid_file.h"
#include "base/strings.h"
#include "supervisor/control.h"

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

}  // namespace

pid_t LivePid(const std::string& pid_path) {
  PidFileState st = ReadPidFile(pid_path);
  return st.held ? st.pid : 0;
}

Result<int> ClaimPidFile(const std::string& path) {
  auto fd = cloister::ClaimPidFile(path);
  if (!fd.ok() && fd.error().code() == ErrorCode::kBusy) {
    return Error(ErrorCode::kBusy, "another supervisor is running for this workspace");
  }
  return fd;
}

VmStatus DeriveStatus(const RunPaths& paths, std::chrono::milliseconds answer_timeout) {
  VmStatus status;
  PidFileState pid_file = ReadPidFile(paths.supervisor_pid);
  if (!pid_file.exists) {
    status.state = Exists(paths.suspend_state) ? VmState::kSuspended : VmState::kStopped;
    return status;
  }
  bool held = pid_file.held;
  status.supervisor_pid = pid_file.pid;
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
