#include "vm/process.h"

#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

#include "base/subprocess.h"

extern char** environ;

namespace cloister::vm {

Result<pid_t> SpawnProcess(const std::vector<std::string>& argv, const SpawnOptions& options) {
  if (argv.empty()) return Error(ErrorCode::kInvalidArgument, "spawn: empty argv");
  int out_fd = open(options.stdout_path.empty() ? "/dev/null" : options.stdout_path.c_str(),
                    O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0640);
  if (out_fd < 0) return ErrnoError("open " + options.stdout_path, errno);
  int err_fd = out_fd;
  if (!options.stderr_path.empty()) {
    err_fd = open(options.stderr_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0640);
    if (err_fd < 0) {
      close(out_fd);
      return ErrnoError("open " + options.stderr_path, errno);
    }
  }
  int null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  std::vector<char*> cargv;
  for (const auto& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);
  std::vector<char*> cenv;
  if (options.env) {
    for (const auto& e : *options.env) cenv.push_back(const_cast<char*>(e.c_str()));
    cenv.push_back(nullptr);
  }
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) {
    int err = errno;
    close(out_fd);
    if (err_fd != out_fd) close(err_fd);
    close(null_fd);
    return ErrnoError("fork", err);
  }
  if (pid == 0) {
    // Only async-signal-safe calls from here on.
    if (options.die_with_parent) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(127);
    }
    if (options.new_session) setsid();
    dup2(null_fd, 0);
    dup2(out_fd, 1);
    dup2(err_fd, 2);
    CloexecFrom(3);  // then only keep_fds lose the flag
    for (int fd : options.keep_fds) {
      int flags = fcntl(fd, F_GETFD);
      if (flags >= 0) fcntl(fd, F_SETFD, flags & ~FD_CLOEXEC);
    }
    sigset_t all;
    sigemptyset(&all);
    sigprocmask(SIG_SETMASK, &all, nullptr);
    signal(SIGPIPE, SIG_DFL);
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    if (options.before_exec) {
      if (int step = options.before_exec(); step != 0) {
        if (options.before_exec_error) {
          const char* msg = options.before_exec_error(step);
          ssize_t ignored = write(2, msg, strlen(msg));
          (void)ignored;
        }
        _exit(125);
      }
    }
    if (options.gid) {
      if (setgroups(options.groups.size(), options.groups.empty() ? nullptr : options.groups.data()) != 0 || setresgid(*options.gid, *options.gid, *options.gid) != 0) {
        _exit(126);
      }
    }
    if (options.uid && setresuid(*options.uid, *options.uid, *options.uid) != 0) _exit(126);
    if (options.die_with_parent && (options.uid || options.gid || options.before_exec)) {
      // Cleared by a credential change (the drop, or one a before_exec makes); set it again.
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(127);
    }
    if (options.env) {
      execvpe(cargv[0], cargv.data(), cenv.data());
    } else {
      execvp(cargv[0], cargv.data());
    }
    _exit(127);
  }
  close(out_fd);
  if (err_fd != out_fd) close(err_fd);
  close(null_fd);
  return pid;
}

std::optional<int> TryReap(pid_t pid) {
  int status = 0;
  pid_t r = waitpid(pid, &status, WNOHANG);
  if (r == pid) {
    if (WIFEXITED(status)) return WEXITSTATUS(status);
    if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
    return 255;
  }
  if (r < 0 && errno == ECHILD) return 255;  // not ours or already reaped
  return std::nullopt;
}

std::optional<int> WaitChild(pid_t pid, std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    if (auto st = TryReap(pid)) return st;
    if (std::chrono::steady_clock::now() >= deadline) return std::nullopt;
    // Polls the child's state with a bounded deadline (no pidfd wait on all kernels we target).
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

bool ProcessAlive(pid_t pid) {
  if (pid <= 0) return false;
  return kill(pid, 0) == 0 || errno == EPERM;
}

}  // namespace cloister::vm
