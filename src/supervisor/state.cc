#include "supervisor/state.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <optional>
#include <string>

#include "base/pid_file.h"
#include "base/strings.h"
#include "supervisor/control.h"

namespace cloister::vm {

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
  status.state = lifecycle::FromPidFile(pid_file, Exists(paths.suspend_state));
  status.supervisor_pid = pid_file.pid;
  if (status.state == VmState::kStopped || status.state == VmState::kSuspended) {
    status.supervisor_pid = 0;
    return status;
  }
  if (status.state == VmState::kBroken) {
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
  status.detail = JsonString(*reply, "stage");
  // SECURITY: the answer comes from our own supervisor, but is still parsed by name against the
  // closed set (lifecycle::StateFromName): anything else is broken, never a guess.
  std::optional<VmState> answered = lifecycle::StateFromName(JsonString(*reply, "state"));
  if (!answered || *answered == VmState::kBroken || *answered == VmState::kCompromised) {
    status.state = VmState::kBroken;
    status.detail = "supervisor reports an unknown state";
    status.hint = "`cloister stop " + paths.name + " --force`";
    return status;
  }
  status.state = *answered;
  // "stopped"/"suspended" from a live supervisor: QEMU is gone and it is exiting.
  if (status.state == VmState::kStopped || status.state == VmState::kSuspended) {
    status.state = VmState::kStopping;
  }
  if (status.state == VmState::kPaused) status.hint = "`cloister wipe " + paths.name + "`";
  return status;
}

}  // namespace cloister::vm
