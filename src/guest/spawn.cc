#include "guest/spawn.h"

#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "base/strings.h"
#include "base/subprocess.h"

namespace cloister::guest {
namespace {

void SetNonBlockCloexec(int fd) {
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  fcntl(fd, F_SETFD, FD_CLOEXEC);
}

// Stages reported by the child through the error pipe.
enum Stage : int { kStageSetsid = 1, kStageTty, kStageGroups, kStageGid, kStageUid, kStageChdir, kStageExec };

const char* StageName(int stage) {
  switch (stage) {
    case kStageSetsid: return "setsid";
    case kStageTty: return "open the pty";
    case kStageGroups: return "setgroups";
    case kStageGid: return "setgid";
    case kStageUid: return "setuid";
    case kStageChdir: return "chdir";
    case kStageExec: return "exec";
  }
  return "start";
}

[[noreturn]] void ChildFail(int fd, int stage) {
  int rec[2] = {stage, errno};
  ssize_t r = write(fd, rec, sizeof rec);
  (void)r;
  _exit(127);
}

}  // namespace

std::optional<std::string> FindInPath(const std::string& name, const std::vector<std::string>& env) {
  if (name.find('/') != std::string::npos) return name;
  std::string path = kDefaultPath;
  for (const auto& e : env) {
    if (StartsWith(e, "PATH=")) path = e.substr(5);
  }
  for (const auto& dir : Split(path, ':')) {
    std::string cand = (dir.empty() ? "." : dir) + "/" + name;
    struct stat st;
    if (stat(cand.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(cand.c_str(), X_OK) == 0) {
      return cand;
    }
  }
  return std::nullopt;
}

Result<Spawned> Spawn(const SpawnSpec& spec) {
  if (spec.argv.empty()) return Error(ErrorCode::kInvalidArgument, "empty command");
  auto program = FindInPath(spec.argv[0], spec.env);
  if (!program) return Error(ErrorCode::kNotFound, spec.argv[0] + ": command not found");

  // Everything the child needs, prepared before fork().
  std::vector<char*> argv;
  std::string argv0 = spec.argv0.empty() ? spec.argv[0] : spec.argv0;
  argv.push_back(argv0.data());
  for (size_t i = 1; i < spec.argv.size(); ++i) argv.push_back(const_cast<char*>(spec.argv[i].c_str()));
  argv.push_back(nullptr);
  std::vector<char*> envp;
  for (const auto& e : spec.env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  std::string cwd = spec.cwd.empty() ? "/" : spec.cwd;
  std::vector<gid_t> groups = spec.user ? spec.user->groups : std::vector<gid_t>{};

  Spawned s;
  int master = -1;
  std::string slave_name;
  int in[2] = {-1, -1}, out[2] = {-1, -1}, err[2] = {-1, -1};
  auto close_all = [&] {
    for (int fd : {master, in[0], in[1], out[0], out[1], err[0], err[1]}) {
      if (fd >= 0) close(fd);
    }
  };
  if (spec.tty) {
    master = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
    if (master < 0 || grantpt(master) != 0 || unlockpt(master) != 0) {
      close_all();
      return ErrnoError("posix_openpt", errno);
    }
    char name[128];
    if (ptsname_r(master, name, sizeof name) != 0) {
      close_all();
      return ErrnoError("ptsname", errno);
    }
    slave_name = name;
    winsize ws{};
    ws.ws_row = spec.rows ? spec.rows : 24;
    ws.ws_col = spec.cols ? spec.cols : 80;
    ioctl(master, TIOCSWINSZ, &ws);
  } else {
    if ((!spec.stdin_null && pipe2(in, O_CLOEXEC) != 0) || pipe2(out, O_CLOEXEC) != 0 ||
        pipe2(err, O_CLOEXEC) != 0) {
      close_all();
      return ErrnoError("pipe", errno);
    }
  }
  int errpipe[2];
  if (pipe2(errpipe, O_CLOEXEC) != 0) {
    close_all();
    return ErrnoError("pipe", errno);
  }

  pid_t pid = fork();
  if (pid < 0) {
    close_all();
    close(errpipe[0]);
    close(errpipe[1]);
    return ErrnoError("fork", errno);
  }
  if (pid == 0) {
    // Child: async-signal-safe calls only.
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    for (int sig = 1; sig < NSIG; ++sig) signal(sig, SIG_DFL);
    if (setsid() < 0) ChildFail(errpipe[1], kStageSetsid);
    if (spec.tty) {
      int slave = open(slave_name.c_str(), O_RDWR);
      if (slave < 0) ChildFail(errpipe[1], kStageTty);
      ioctl(slave, TIOCSCTTY, 0);
      dup2(slave, 0);
      dup2(slave, 1);
      dup2(slave, 2);
      if (slave > 2) close(slave);
    } else {
      if (spec.stdin_null) {
        int null = open("/dev/null", O_RDONLY);
        if (null >= 0) dup2(null, 0);
      } else {
        dup2(in[0], 0);
      }
      dup2(out[1], 1);
      dup2(err[1], 2);
    }
    CloexecFrom(3);  // the agent's channel and sockets stay the agent's
    if (spec.user) {
      if (setgroups(groups.size(), groups.data()) != 0) ChildFail(errpipe[1], kStageGroups);
      if (setgid(spec.user->gid) != 0) ChildFail(errpipe[1], kStageGid);
      if (setuid(spec.user->uid) != 0) ChildFail(errpipe[1], kStageUid);
    }
    if (chdir(cwd.c_str()) != 0) ChildFail(errpipe[1], kStageChdir);
    execve(program->c_str(), argv.data(), envp.data());
    ChildFail(errpipe[1], kStageExec);
  }
  close(errpipe[1]);
  for (int* fd : {&in[0], &out[1], &err[1]}) {
    if (*fd >= 0) close(*fd);
    *fd = -1;
  }
  int rec[2] = {0, 0};
  ssize_t n;
  do {
    n = read(errpipe[0], rec, sizeof rec);
  } while (n < 0 && errno == EINTR);
  close(errpipe[0]);
  if (n == sizeof rec) {
    int status;
    waitpid(pid, &status, 0);
    close_all();
    int e = rec[1];
    std::string what = std::string(StageName(rec[0])) + " " +
                       (rec[0] == kStageChdir ? cwd : spec.argv[0]) + ": " + std::strerror(e);
    if (rec[0] == kStageExec && (e == ENOENT)) return Error(ErrorCode::kNotFound, what);
    if (rec[0] == kStageExec && (e == EACCES || e == ENOEXEC)) {
      return Error(ErrorCode::kPermissionDenied, what);
    }
    return Error(ErrorCode::kFailedPrecondition, what);
  }
  s.pid = pid;
  s.pidfd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
  if (s.pidfd >= 0) fcntl(s.pidfd, F_SETFD, FD_CLOEXEC);
  if (spec.tty) {
    s.master = master;
    SetNonBlockCloexec(master);
  } else {
    s.in = in[1];
    s.out = out[0];
    s.err = err[0];
    for (int fd : {s.in, s.out, s.err}) {
      if (fd >= 0) SetNonBlockCloexec(fd);
    }
  }
  return s;
}

}  // namespace cloister::guest
