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
#include "lifecycle/lifecycle.h"
#include "protocol/contract.h"
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

// Start errors point at `cloister logs NAME` (both logs, labelled and terminal-safe).
std::string WithLogsHint(const std::string& hint, const std::string& name) {
  std::string logs = "`cloister logs " + name + "` shows its boot console and supervisor log";
  return hint.empty() ? logs : hint + "; " + logs;
}

}  // namespace

Status StartWorkspace(Store& store, const std::string& name, const StartOptions& options,
                      std::ostream& progress) {
  ASSIGN_OR_RETURN(WorkspaceConfig config, store.LoadConfig(name));
  RunPaths paths = RunPathsFor(store, name);
  VmStatus status = DeriveStatus(paths);
  // The lifecycle table decides (a compromised flag refuses the boot, naming the wipe).
  lifecycle::State state = lifecycle::WithCompromisedFlag(status.state, config.compromised);
  ASSIGN_OR_RETURN(lifecycle::Rule rule,
                   lifecycle::Decide(state, lifecycle::Action::kStart, name,
                                     state == lifecycle::State::kCompromised
                                         ? config.compromised_reason
                                         : status.detail));
  if (rule.verdict == lifecycle::Verdict::kAlready) {
    progress << "cloister: " << name << " is already " << VmStateName(state) << "\n";
    return OkStatus();
  }
  if (rule.verdict == lifecycle::Verdict::kWaitReady) {
    if (options.detach) {
      progress << "cloister: " << name << " is already " << VmStateName(state) << "\n";
      return OkStatus();
    }
    ReadyWait wait;
    wait.action = lifecycle::Action::kStart;
    wait.timeout = options.ready_timeout;
    wait.progress = &progress;
    return WaitUntilRunning(store, name, wait);
  }
  if (state == VmState::kBroken) {
    if (LivePid(paths.supervisor_pid) != 0) {
      return Error(ErrorCode::kBusy, name + " is broken: " + status.detail, status.hint);
    }
    progress << "cloister: cleaning up after a dead supervisor (" << status.detail << ")\n";
    CleanStaleRun(paths);
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
      } else if (StartsWith(line, "timings")) {
        if (options.timings) *options.timings = line;
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
  if (StartsWith(final_line, "paused ")) {
    // The compromise detector froze the VM during its boot: the supervisor stays (kPaused).
    std::string rest = final_line.substr(7);
    size_t tab = rest.find('\t');
    return Error(ErrorCode::kCompromised, "start " + name + ": " + rest.substr(0, tab),
                 tab == std::string::npos ? "" : rest.substr(tab + 1));
  }
  // A failed boot: the supervisor is cleaning up (QEMU killed, run/ emptied); wait for it so the
  // workspace is stopped when we return and can be started again at once.
  (void)WaitSupervisorGone(paths, Clock::now() + std::chrono::seconds(30));
  if (StartsWith(final_line, "error ")) {
    std::string rest = final_line.substr(6);
    size_t tab = rest.find('\t');
    return Error(ErrorCode::kUnavailable, "start " + name + ": " + rest.substr(0, tab),
                 WithLogsHint(tab == std::string::npos ? "" : rest.substr(tab + 1), name));
  }
  return Error(ErrorCode::kUnavailable, "start " + name + ": the supervisor exited unexpectedly",
               WithLogsHint("see " + paths.supervisor_log + " and the boot log " + paths.console_log,
                            name));
}

Status StopWorkspace(Store& store, const std::string& name, const StopOptions& options,
                     std::ostream& progress) {
  RunPaths paths = RunPathsFor(store, name);
  VmStatus status = DeriveStatus(paths, std::chrono::seconds(3));
  lifecycle::Action action = options.suspend ? lifecycle::Action::kSuspend
                             : options.force ? lifecycle::Action::kForceStop
                                             : lifecycle::Action::kStop;
  ASSIGN_OR_RETURN(lifecycle::Rule rule,
                   lifecycle::Decide(status.state, action, name, status.detail));
  if (rule.verdict == lifecycle::Verdict::kAlready && !lifecycle::IsLive(status.state)) {
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

Result<std::string> CheckpointRunningWorkspace(Store& store, const std::string& name) {
  RunPaths paths = RunPathsFor(store, name);
  VmStatus status = DeriveStatus(paths);
  RETURN_IF_ERROR(
      lifecycle::Check(status.state, lifecycle::Action::kLiveCheckpoint, name, status.detail));
  ASSIGN_OR_RETURN(json reply, ControlRequest(paths.supervisor_socket, {{"op", kCheckpointOp}},
                                              std::chrono::minutes(5)));
  std::string id = JsonString(reply, "id");
  if (!IsValidCheckpointId(id)) {
    return Error(ErrorCode::kInternal, "the supervisor of " + name + " answered no checkpoint id");
  }
  return id;
}

Status RebootWorkspace(Store& store, const std::string& name, std::ostream& progress) {
  RunPaths paths = RunPathsFor(store, name);
  VmStatus status = DeriveStatus(paths);
  RETURN_IF_ERROR(lifecycle::Check(status.state, lifecycle::Action::kReboot, name, status.detail));
  progress << "cloister: rebooting " << name << "\n";
  auto reply = ControlRequest(paths.supervisor_socket, {{"op", "reboot"}}, std::chrono::minutes(15));
  if (!reply.ok()) return reply.error();
  return OkStatus();
}

namespace {

// WaitUntilRunning against a deadline fixed by the caller (wait.timeout is what errors name).
Status WaitUntilRunningBy(Store& store, const std::string& name, const ReadyWait& wait,
                          Clock::time_point deadline) {
  RunPaths paths = RunPathsFor(store, name);
  std::string shown;
  while (true) {
    VmStatus status = DeriveStatus(paths, std::chrono::seconds(3));
    ASSIGN_OR_RETURN(lifecycle::Rule rule,
                     lifecycle::Decide(status.state, wait.action, name, status.detail));
    if (rule.verdict != lifecycle::Verdict::kWaitReady) {
      if (wait.progress && !shown.empty()) *wait.progress << "cloister: ready\n" << std::flush;
      return OkStatus();
    }
    std::string line = std::string(VmStateName(status.state)) +
                       (status.detail.empty() ? "" : ": " + status.detail);
    if (wait.progress && line != shown) {
      if (shown.empty()) {
        *wait.progress << "cloister: waiting for " << name << " to be ready ("
                       << wait.timeout.count() << " s at most)\n";
      }
      *wait.progress << "cloister: " << line << "\n" << std::flush;
      shown = line;
    }
    if (Clock::now() >= deadline) {
      return Error(ErrorCode::kUnavailable,
                   name + " is still " + line + " after " + std::to_string(wait.timeout.count()) +
                       " s",
                   "wait longer (--wait SECONDS), or see its boot log " + paths.console_log +
                       " (`cloister logs " + name + "`; `cloister stop " + name +
                       " --force` gives up)");
    }
    // The guest is booting; poll the supervisor's answer with a bounded deadline.
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
}

}  // namespace

Status WaitUntilRunning(Store& store, const std::string& name, const ReadyWait& wait) {
  return WaitUntilRunningBy(store, name, wait, Clock::now() + wait.timeout);
}

Result<int> OpenExecStream(Store& store, const std::string& name,
                           const std::vector<std::string>& args, const ReadyWait& wait) {
  return OpenGuestStream(store, name, protocol::kExecService, args, wait);
}

Result<int> OpenGuestStream(Store& store, const std::string& name, const std::string& service,
                            const std::vector<std::string>& args, const ReadyWait& wait) {
  RunPaths paths = RunPathsFor(store, name);
  auto deadline = Clock::now() + wait.timeout;
  while (true) {
    // The lifecycle table decides: go when running, wait for READY when booting (bounded),
    // else its refusal (not running, paused by the compromise detector, ...).
    RETURN_IF_ERROR(WaitUntilRunningBy(store, name, wait, deadline));
    int fd = -1;
    auto reply = ControlRequest(
        paths.supervisor_socket,
        {{"op", "open-stream"},
         {"service", service},
         {"action", wait.action == lifecycle::Action::kAttach ? "attach" : "exec"},
         {"args", args}},
        std::chrono::seconds(40), &fd);
    if (!reply.ok()) {
      // The supervisor's table answered: kBusy "not ready yet" (a reboot began meanwhile) is
      // worth another wait; anything else is the answer.
      if (reply.error().code() == ErrorCode::kBusy && Clock::now() < deadline) {
        // Between our look and its answer the VM left running: poll again (bounded).
        std::this_thread::sleep_for(std::chrono::milliseconds(250));
        continue;
      }
      if (LivePid(paths.supervisor_pid) == 0) {
        return lifecycle::Refusal(VmState::kStopped, wait.action, name);  // it exited meanwhile
      }
      return reply.error();
    }
    if (fd < 0) return Error(ErrorCode::kInternal, "the supervisor sent no stream");
    return fd;
  }
}

Error ExplainEndedSession(Store& store, const std::string& name, lifecycle::Action action,
                          const Error& error) {
  if (error.code() != ErrorCode::kUnavailable) return error;
  VmStatus status = DeriveStatus(RunPathsFor(store, name), std::chrono::seconds(3));
  if (status.state != VmState::kPaused) return error;
  Error why = lifecycle::Refusal(status.state, action, name, status.detail);
  return Error(why.code(), std::string(lifecycle::ActionName(action)) + " ended: " + why.message(),
               why.hint());
}

}  // namespace cloister::vm
