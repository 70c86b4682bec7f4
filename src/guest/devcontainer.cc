#include "guest/devcontainer.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>

#include "base/file_util.h"
#include "guest/config.h"
#include "guest/spawn.h"

namespace cloister::guest {
namespace {

Error LifecycleBad(const std::string& what) {
  return Error(ErrorCode::kCorrupt, "config.json: devcontainer: " + what);
}

bool NoNul(const std::string& s) { return s.find('\0') == std::string::npos; }

Result<std::string> LifecycleString(const nlohmann::json& j, const char* key, size_t max) {
  if (!j.contains(key)) return std::string();
  if (!j[key].is_string()) return LifecycleBad(std::string(key) + " must be a string");
  std::string s = j[key].get<std::string>();
  if (s.size() > max || !NoNul(s)) return LifecycleBad(std::string(key) + " is too long");
  return s;
}

Result<std::vector<LifecycleStep>> ParseSteps(const nlohmann::json& j, const char* key) {
  std::vector<LifecycleStep> out;
  if (!j.contains(key)) return out;
  const auto& steps = j[key];
  if (!steps.is_array() || steps.size() > kMaxLifecycleSteps) {
    return LifecycleBad(std::string(key) + " must be an array of at most " +
                        std::to_string(kMaxLifecycleSteps) + " steps");
  }
  for (const auto& s : steps) {
    if (!s.is_object()) return LifecycleBad("a step is not an object");
    LifecycleStep step;
    ASSIGN_OR_RETURN(step.name, LifecycleString(s, "name", 64));
    ASSIGN_OR_RETURN(step.origin, LifecycleString(s, "origin", 600));
    if (step.name.empty()) return LifecycleBad("a step without a name");
    if (s.contains("parallel")) {
      if (!s["parallel"].is_boolean()) return LifecycleBad("parallel must be a boolean");
      step.parallel = s["parallel"].get<bool>();
    }
    if (!s.contains("commands") || !s["commands"].is_array() || s["commands"].empty() ||
        s["commands"].size() > kMaxLifecycleCommands) {
      return LifecycleBad("step " + step.name + " needs 1 to " +
                          std::to_string(kMaxLifecycleCommands) + " commands");
    }
    if (!step.parallel && s["commands"].size() != 1) {
      return LifecycleBad("step " + step.name + " has several commands but is not parallel");
    }
    for (const auto& c : s["commands"]) {
      if (!c.is_object()) return LifecycleBad("a command is not an object");
      LifecycleCommandSpec cmd;
      ASSIGN_OR_RETURN(cmd.name, LifecycleString(c, "name", 256));
      ASSIGN_OR_RETURN(cmd.shell, LifecycleString(c, "shell", 64 * 1024));
      if (c.contains("argv")) {
        const auto& argv = c["argv"];
        if (!argv.is_array() || argv.empty() || argv.size() > kMaxLifecycleArgs) {
          return LifecycleBad("argv must be an array of 1 to " +
                              std::to_string(kMaxLifecycleArgs) + " strings");
        }
        for (const auto& a : argv) {
          if (!a.is_string() || !NoNul(a.get<std::string>()) || a.get<std::string>().size() > 64 * 1024) {
            return LifecycleBad("an argv element is not a string");
          }
          cmd.argv.push_back(a.get<std::string>());
        }
        if (cmd.argv[0].empty()) return LifecycleBad("an empty program name");
      }
      if (cmd.shell.empty() == cmd.argv.empty()) {
        return LifecycleBad("a command needs either shell or argv");
      }
      step.commands.push_back(std::move(cmd));
    }
    out.push_back(std::move(step));
  }
  return out;
}

// The exit status of a finished child as a shell reports it.
int ExitCode(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

std::string DescribeCommand(const LifecycleCommandSpec& c) {
  if (!c.shell.empty()) return "sh -c " + c.shell;
  std::string s;
  for (const auto& a : c.argv) s += (s.empty() ? "" : " ") + a;
  return s;
}

class LifecycleRunner {
 public:
  explicit LifecycleRunner(const LifecycleRun& run) : run_(run) {}
  ~LifecycleRunner() {
    if (log_ >= 0) close(log_);
  }

  Status Open() {
    std::error_code ec;
    std::filesystem::create_directories(run_.paths.run_dir, ec);
    std::filesystem::create_directories(std::filesystem::path(run_.paths.log).parent_path(), ec);
    log_ = open(run_.paths.log.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (log_ < 0) return ErrnoError("open " + run_.paths.log, errno);
    return OkStatus();
  }

  void Say(const std::string& status) {
    (void)WriteFileAtomic(run_.paths.Status(), status + "\n", 0644);
  }
  void Log(const std::string& line) { (void)WriteAll(log_, line + "\n", run_.paths.log); }

  // Runs one step's commands (all at once when parallel), their output into the log.
  Status Step(const LifecycleStep& step) {
    Say("running " + step.name);
    Log("cloister: " + step.name + " (" + step.origin + ")");
    std::vector<Spawned> children;
    std::vector<std::string> names;
    Status failed = OkStatus();
    for (const LifecycleCommandSpec& c : step.commands) {
      Log("cloister: " + (c.name.empty() ? std::string() : "[" + c.name + "] ") + DescribeCommand(c));
      SpawnSpec spec;
      spec.argv = c.shell.empty() ? c.argv : std::vector<std::string>{"sh", "-c", c.shell};
      spec.env = run_.env;
      spec.cwd = Cwd();
      if (run_.switch_user) spec.user = run_.user;
      spec.stdin_null = true;
      auto child = Spawn(spec);
      if (!child.ok()) {
        Log("cloister: " + step.name + ": " + child.error().message());
        failed = Error(ErrorCode::kUnavailable, step.name + ": " + child.error().message());
        break;
      }
      children.push_back(*child);
      names.push_back(c.name);
    }
    Pump(children);
    int worst = 0;
    for (size_t i = 0; i < children.size(); ++i) {
      int status = 0;
      while (waitpid(children[i].pid, &status, 0) < 0 && errno == EINTR) {
      }
      if (children[i].pidfd >= 0) close(children[i].pidfd);
      int code = ExitCode(status);
      if (code != 0) {
        Log("cloister: " + step.name + (names[i].empty() ? "" : " [" + names[i] + "]") +
            " exited with " + std::to_string(code));
        if (worst == 0) worst = code;
      }
    }
    if (!failed.ok()) worst = worst ? worst : 127;
    if (worst != 0) {
      Say("failed " + step.name + " (exit " + std::to_string(worst) + ")");
      return Error(ErrorCode::kUnavailable,
                   "the devcontainer's " + step.name + " failed (exit " + std::to_string(worst) + ")",
                   "its output is in " + run_.paths.log + "; the next boot runs it again");
    }
    return OkStatus();
  }

 private:
  std::string Cwd() const {
    struct stat st;
    if (!run_.cwd.empty() && stat(run_.cwd.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) return run_.cwd;
    return run_.user.home.empty() ? "/" : run_.user.home;
  }

  // Copies every child's stdout and stderr into the log until all are closed.
  void Pump(std::vector<Spawned>& children) {
    std::vector<int> fds;
    for (Spawned& c : children) {
      for (int* fd : {&c.out, &c.err}) {
        if (*fd >= 0) fds.push_back(*fd);
        *fd = -1;
      }
      if (c.in >= 0) close(c.in);
    }
    char buf[16384];
    while (!fds.empty()) {
      std::vector<pollfd> p;
      for (int fd : fds) p.push_back({fd, POLLIN, 0});
      if (poll(p.data(), p.size(), -1) < 0) {
        if (errno == EINTR) continue;
        break;
      }
      std::vector<int> open_fds;
      for (const pollfd& q : p) {
        bool keep = true;
        if (q.revents & (POLLIN | POLLHUP | POLLERR)) {
          ssize_t n = read(q.fd, buf, sizeof buf);
          if (n > 0) {
            (void)WriteAll(log_, std::string_view(buf, static_cast<size_t>(n)), run_.paths.log);
          } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
            keep = false;
          }
        }
        if (keep) {
          open_fds.push_back(q.fd);
        } else {
          close(q.fd);
        }
      }
      fds = std::move(open_fds);
    }
    for (int fd : fds) close(fd);
  }

  const LifecycleRun& run_;
  int log_ = -1;
};

}  // namespace

Result<DevcontainerLifecycle> ParseDevcontainerLifecycle(const nlohmann::json& j) {
  DevcontainerLifecycle l;
  if (j.is_null()) return l;
  if (!j.is_object()) return LifecycleBad("must be an object");
  l.enabled = true;
  ASSIGN_OR_RETURN(std::string user, LifecycleString(j, "user", 32));
  if (!user.empty()) l.user = user;
  if (l.user.empty() || l.user[0] == '-' ||
      l.user.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") !=
          std::string::npos) {
    return LifecycleBad("user is not a user name");
  }
  ASSIGN_OR_RETURN(l.create_id, LifecycleString(j, "create_id", 64));
  if (l.create_id.find_first_not_of("0123456789abcdef") != std::string::npos) {
    return LifecycleBad("create_id must be lower-case hex");
  }
  ASSIGN_OR_RETURN(l.create, ParseSteps(j, "create"));
  ASSIGN_OR_RETURN(l.start, ParseSteps(j, "start"));
  return l;
}

nlohmann::json DevcontainerLifecycleJson(const DevcontainerLifecycle& l) {
  auto steps = [](const std::vector<LifecycleStep>& list) {
    nlohmann::json out = nlohmann::json::array();
    for (const LifecycleStep& s : list) {
      nlohmann::json cmds = nlohmann::json::array();
      for (const LifecycleCommandSpec& c : s.commands) {
        nlohmann::json cj = {{"name", c.name}};
        if (c.argv.empty()) {
          cj["shell"] = c.shell;
        } else {
          cj["argv"] = c.argv;
        }
        cmds.push_back(std::move(cj));
      }
      out.push_back({{"name", s.name}, {"origin", s.origin}, {"parallel", s.parallel},
                     {"commands", std::move(cmds)}});
    }
    return out;
  };
  return {{"user", l.user}, {"create_id", l.create_id}, {"create", steps(l.create)},
          {"start", steps(l.start)}};
}

Status RunDevcontainerLifecycle(const DevcontainerLifecycle& l, const LifecycleRun& run) {
  LifecycleRunner r(run);
  if (Status st = r.Open(); !st.ok()) {
    (void)WriteFileAtomic(run.paths.Status(), "failed to open the log\n", 0644);
    return st;
  }
  auto marker = ReadFileBounded(run.paths.Marker(), 256, Follow::kNoSymlinks);
  bool created = marker.ok() && !l.create_id.empty() && *marker == l.create_id + "\n";
  if (!created) {
    for (const LifecycleStep& s : l.create) RETURN_IF_ERROR(r.Step(s));
    std::error_code ec;
    std::filesystem::create_directories(run.paths.marker_dir, ec);
    if (Status st = WriteFileAtomic(run.paths.Marker(), l.create_id + "\n", 0644); !st.ok()) {
      r.Log("cloister: " + st.error().message());
    }
  } else if (!l.create.empty()) {
    r.Log("cloister: the create commands ran on this system disk already");
  }
  for (const LifecycleStep& s : l.start) RETURN_IF_ERROR(r.Step(s));
  r.Log("cloister: the devcontainer's lifecycle commands are done");
  r.Say("ok");
  return OkStatus();
}

std::string LifecycleWindowScript(const LifecyclePaths& paths) {
  std::string q_status = ShellQuote(paths.Status());
  std::string q_log = ShellQuote(paths.log);
  std::string s = "#!/bin/sh\n# Written by cloister-agent at every boot: shows the devcontainer's "
                  "lifecycle commands (guest/devcontainer.h).\nstatus=" + q_status + "\nlog=" + q_log + "\n";
  s += R"SH(printf 'cloister: the devcontainer'\''s lifecycle commands run after the first boot'\''s checks (log: %s)\n' "$log"
tail -n 0 -F "$log" 2>/dev/null &
tailpid=$!
while :; do
  s=$(cat "$status" 2>/dev/null)
  case "$s" in
    ok) kill "$tailpid" 2>/dev/null; printf 'cloister: the devcontainer'\''s lifecycle commands are done\n'; break ;;
    failed*) kill "$tailpid" 2>/dev/null
      printf '\ncloister: the devcontainer'\''s lifecycle commands stopped: %s; the log is %s\n' "$s" "$log"
      printf 'cloister: a shell follows; the next boot (cloister reboot) runs them again\n'
      break ;;
  esac
  sleep 1
done
exec "${SHELL:-/bin/sh}" -l
)SH";
  return s;
}

Status WriteLifecycleWindowScript(const LifecyclePaths& paths) {
  std::error_code ec;
  std::filesystem::create_directories(paths.run_dir, ec);
  return WriteFileAtomic(paths.WindowScript(), LifecycleWindowScript(paths), 0755);
}

}  // namespace cloister::guest
