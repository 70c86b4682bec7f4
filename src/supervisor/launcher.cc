#include "supervisor/launcher.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include "base/strings.h"
#include "supervisor/control.h"
#include "supervisor/environment.h"
#include "vm/process.h"
#include "supervisor/workspace.h"

namespace cloister::vm {

namespace fs = std::filesystem;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

Result<std::string> CloisterExecutable() {
  if (const char* e = std::getenv("CLOISTER_EXE"); e && *e) return std::string(e);
  std::error_code ec;
  fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (!ec && self.filename() == "cloister") return self.string();
  if (const char* b = std::getenv("CLOISTER_BINARY_DIR"); b && *b) {
    std::string p = std::string(b) + "/src/cli/cloister";
    if (access(p.c_str(), X_OK) == 0) return p;
  }
  return Error(ErrorCode::kNotFound, "cannot find the cloister executable to run the supervisor",
               "set CLOISTER_EXE");
}

VmStatus WorkspaceStatus(Store& store, const std::string& name) {
  return DeriveStatus(RunPathsFor(store, name));
}

namespace {

// Removes what a dead supervisor left in run/ (never the suspend state).
void CleanStaleRun(const RunPaths& p) {
  for (const std::string& f : {p.supervisor_pid, p.supervisor_socket, p.qmp_socket,
                               p.channel_socket, p.meta_disk}) {
    unlink(f.c_str());
  }
}

// Waits until the supervisor's pid-file lock is released (it exits) or the deadline passes.
bool WaitSupervisorGone(const RunPaths& p, Clock::time_point deadline) {
  while (LivePid(p.supervisor_pid) != 0) {
    if (Clock::now() > deadline) return false;
    // The supervisor is finishing its cleanup; poll its lock with a bounded deadline.
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

}  // namespace

Status StartWorkspace(Store& store, const std::string& name, const StartOptions& options,
                      std::ostream& progress) {
  ASSIGN_OR_RETURN(WorkspaceConfig config, store.LoadConfig(name));
  RETURN_IF_ERROR(Store::CheckNotCompromised(config));
  RunPaths paths = RunPathsFor(store, name);
  VmStatus status = DeriveStatus(paths);
  switch (status.state) {
    case VmState::kRunning:
      progress << "cloister: " << name << " is already running\n";
      return OkStatus();
    case VmState::kBooting:
      if (options.detach) {
        progress << "cloister: " << name << " is already booting\n";
        return OkStatus();
      }
      [[fallthrough]];
    case VmState::kStopping:
    case VmState::kSuspending:
      return Error(ErrorCode::kBusy, name + " is " + VmStateName(status.state),
                   "wait for it, or `cloister stop " + name + " --force`");
    case VmState::kBroken:
      if (LivePid(paths.supervisor_pid) != 0) {
        return Error(ErrorCode::kBusy, name + " is broken: " + status.detail, status.hint);
      }
      progress << "cloister: cleaning up after a dead supervisor (" << status.detail << ")\n";
      CleanStaleRun(paths);
      break;
    case VmState::kSuspended:
    case VmState::kStopped:
      break;
  }
  ASSIGN_OR_RETURN(AccelChoice accel, ChooseAccel(options.accel));
  if (!accel.notice.empty()) progress << "cloister: " << accel.notice << "\n";
  ASSIGN_OR_RETURN(std::string exe, CloisterExecutable());

  std::error_code ec;
  fs::create_directories(paths.run_dir, ec);
  chmod(paths.run_dir.c_str(), 0700);
  int pipefd[2];
  if (pipe2(pipefd, O_CLOEXEC) != 0) return ErrnoError("pipe", errno);
  std::vector<std::string> argv = {exe, "--store", store.root(), "_supervise", name,
                                   "--accel", AccelName(accel.accel),
                                   "--progress-fd", std::to_string(pipefd[1]),
                                   "--ready-timeout", std::to_string(options.ready_timeout.count())};
  if (!options.sandbox) argv.push_back("--no-sandbox");
  SpawnOptions so;
  so.stdout_path = paths.supervisor_log;
  so.new_session = true;
  so.keep_fds = {pipefd[1]};
  // SECURITY: the supervisor (and so QEMU) never sees the caller's shell variables, where users
  // keep API keys (supervisor/environment.h).
  so.env = SupervisorEnvironment();
  auto pid = SpawnProcess(argv, so);
  close(pipefd[1]);
  if (!pid.ok()) {
    close(pipefd[0]);
    return pid.error();
  }
  // Reap the supervisor if it exits early (it is our child until we exit).
  std::thread([p = *pid] { WaitChild(p, std::chrono::hours(24 * 365)); }).detach();

  std::string buf, final_line;
  char chunk[1024];
  while (true) {
    ssize_t n = read(pipefd[0], chunk, sizeof(chunk));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    buf.append(chunk, static_cast<size_t>(n));
    size_t nl;
    while ((nl = buf.find('\n')) != std::string::npos) {
      std::string line = buf.substr(0, nl);
      buf.erase(0, nl + 1);
      if (StartsWith(line, "stage ")) {
        progress << "cloister: " << line.substr(6) << "\n" << std::flush;
      } else if (StartsWith(line, "launched")) {
        if (options.detach) {
          // QEMU runs and the channel is connected: the rest of the boot is the supervisor's.
          // (Closing our end makes its later progress writes fail quietly.)
          close(pipefd[0]);
          return OkStatus();
        }
      } else {
        final_line = line;
      }
    }
  }
  close(pipefd[0]);
  if (StartsWith(final_line, "ready")) return OkStatus();
  // A failed boot: the supervisor is cleaning up (QEMU killed, run/ emptied); wait for it so the
  // workspace is stopped when we return and can be started again at once.
  (void)WaitSupervisorGone(paths, Clock::now() + std::chrono::seconds(30));
  if (StartsWith(final_line, "error ")) {
    std::string rest = final_line.substr(6);
    size_t tab = rest.find('\t');
    return Error(ErrorCode::kUnavailable, "start " + name + ": " + rest.substr(0, tab),
                 tab == std::string::npos ? "" : rest.substr(tab + 1));
  }
  return Error(ErrorCode::kUnavailable, "start " + name + ": the supervisor exited unexpectedly",
               "see " + paths.supervisor_log + " and the boot log " + paths.console_log);
}

Status StopWorkspace(Store& store, const std::string& name, const StopOptions& options,
                     std::ostream& progress) {
  RunPaths paths = RunPathsFor(store, name);
  VmStatus status = DeriveStatus(paths, std::chrono::seconds(3));
  if (status.state == VmState::kStopped || status.state == VmState::kSuspended) {
    if (options.suspend && status.state == VmState::kStopped) {
      return Error(ErrorCode::kFailedPrecondition, name + " is not running; nothing to suspend");
    }
    progress << "cloister: " << name << " is already " << VmStateName(status.state) << "\n";
    return OkStatus();
  }
  if (status.state == VmState::kBroken) {
    pid_t pid = LivePid(paths.supervisor_pid);
    if (pid != 0) {
      if (!options.force) {
        return Error(ErrorCode::kBusy, name + " is broken: " + status.detail, status.hint);
      }
      // A hung supervisor: killing it kills QEMU too (PR_SET_PDEATHSIG).
      kill(pid, SIGKILL);
      if (!WaitSupervisorGone(paths, Clock::now() + std::chrono::seconds(10))) {
        return Error(ErrorCode::kBusy, "supervisor pid " + std::to_string(pid) + " did not die");
      }
    }
    CleanStaleRun(paths);
    progress << "cloister: cleaned up after a dead supervisor\n";
    return OkStatus();
  }
  json req;
  if (options.suspend) {
    req = {{"op", "suspend"}};
    progress << "cloister: suspending " << name << "\n";
  } else {
    req = {{"op", "stop"}, {"force", options.force},
           {"timeout_ms", static_cast<uint64_t>(options.timeout.count())}};
    progress << "cloister: stopping " << name << (options.force ? " (forced)" : "") << "\n";
  }
  auto reply = ControlRequest(paths.supervisor_socket, req,
                              options.timeout + std::chrono::minutes(options.suspend ? 10 : 1));
  if (!reply.ok()) return reply.error();
  if (!WaitSupervisorGone(paths, Clock::now() + std::chrono::seconds(30))) {
    return Error(ErrorCode::kBusy, "the supervisor of " + name + " did not exit",
                 "`cloister stop " + name + " --force`");
  }
  return OkStatus();
}

Status RebootWorkspace(Store& store, const std::string& name, std::ostream& progress) {
  RunPaths paths = RunPathsFor(store, name);
  VmStatus status = DeriveStatus(paths);
  if (status.state != VmState::kRunning) {
    return Error(ErrorCode::kFailedPrecondition,
                 name + " is " + VmStateName(status.state) + ", not running",
                 "`cloister start " + name + "`");
  }
  progress << "cloister: rebooting " << name << "\n";
  auto reply = ControlRequest(paths.supervisor_socket, {{"op", "reboot"}}, std::chrono::minutes(15));
  if (!reply.ok()) return reply.error();
  return OkStatus();
}

Result<int> OpenExecStream(Store& store, const std::string& name,
                           const std::vector<std::string>& args) {
  RunPaths paths = RunPathsFor(store, name);
  if (LivePid(paths.supervisor_pid) == 0) {
    return Error(ErrorCode::kFailedPrecondition, name + " is not running",
                 "`cloister start " + name + "`");
  }
  int fd = -1;
  auto reply = ControlRequest(paths.supervisor_socket, {{"op", "open-exec"}, {"args", args}},
                              std::chrono::seconds(40), &fd);
  if (!reply.ok()) return reply.error();
  if (fd < 0) return Error(ErrorCode::kInternal, "the supervisor sent no stream");
  return fd;
}

}  // namespace cloister::vm
