#include "base/subprocess.h"

#include <fcntl.h>
#include <linux/close_range.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "base/strings.h"

extern char** environ;

namespace cloister {
namespace {

void CloseFd(int& fd) {
  if (fd >= 0) close(fd);
  fd = -1;
}

}  // namespace

bool ProgramExists(const std::string& program) {
  if (program.find('/') != std::string::npos) return access(program.c_str(), X_OK) == 0;
  const char* path = std::getenv("PATH");
  std::string p = path ? path : "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin";
  for (const std::string& dir : Split(p, ':')) {
    std::string full = (dir.empty() ? "." : dir) + "/" + program;
    struct stat st;
    if (stat(full.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(full.c_str(), X_OK) == 0) {
      return true;
    }
  }
  return false;
}

void CloexecFrom(int lowest) {
#ifdef SYS_close_range
  if (syscall(SYS_close_range, static_cast<unsigned>(lowest), ~0U, CLOSE_RANGE_CLOEXEC) == 0) return;
#endif
  // Older kernels: every descriptor below the limit (getrlimit is a plain system call).
  struct rlimit rl;
  int max_fd = 1 << 16;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
    max_fd = static_cast<int>(std::min<rlim_t>(rl.rlim_cur, 1 << 20));
  }
  for (int fd = lowest; fd < max_fd; ++fd) {
    int flags = fcntl(fd, F_GETFD);
    if (flags >= 0 && !(flags & FD_CLOEXEC)) fcntl(fd, F_SETFD, flags | FD_CLOEXEC);
  }
}

namespace {

// write(2) to a pipe whose reader may be gone (a child that exited without reading its stdin):
// EPIPE, not a SIGPIPE that kills the caller. SIGPIPE is blocked in this thread for the write and
// the one the write raised, if any, is taken back before the mask is restored (a SIGPIPE that was
// already pending stays pending).
ssize_t WriteWithoutSigpipe(int fd, const char* data, size_t n) {
  sigset_t pipe_set, old_set, pending;
  sigemptyset(&pipe_set);
  sigaddset(&pipe_set, SIGPIPE);
  sigpending(&pending);
  const bool was_pending = sigismember(&pending, SIGPIPE) == 1;
  pthread_sigmask(SIG_BLOCK, &pipe_set, &old_set);
  ssize_t w = write(fd, data, n);
  const int saved = errno;
  if (w < 0 && saved == EPIPE && !was_pending) {
    const timespec zero{0, 0};
    while (sigtimedwait(&pipe_set, nullptr, &zero) < 0 && errno == EINTR) {
    }
  }
  pthread_sigmask(SIG_SETMASK, &old_set, nullptr);
  errno = saved;
  return w;
}

}  // namespace

Result<RunOutput> RunProcess(const std::vector<std::string>& argv, const RunOptions& options) {
  if (argv.empty()) return Error(ErrorCode::kInvalidArgument, "Run: empty argv");
  if (!ProgramExists(argv[0])) {
    return Error(ErrorCode::kNotFound, "program not found: " + argv[0],
                 "run scripts/install-deps.sh to install cloister's dependencies");
  }
  int in_pipe[2] = {-1, -1}, out_pipe[2] = {-1, -1}, err_pipe[2] = {-1, -1};
  if (pipe2(in_pipe, O_CLOEXEC) != 0) return ErrnoError("pipe", errno);
  if (options.capture_stdout && pipe2(out_pipe, O_CLOEXEC) != 0) return ErrnoError("pipe", errno);
  if (options.capture_stderr && pipe2(err_pipe, O_CLOEXEC) != 0) return ErrnoError("pipe", errno);

  // Build argv/envp before fork: only async-signal-safe calls after it.
  std::vector<char*> cargv;
  for (const auto& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);
  std::vector<std::string> env_strings;
  for (char** e = environ; !options.clear_env && *e; ++e) {
    std::string kv = *e;
    std::string key = kv.substr(0, kv.find('='));
    bool drop = options.env_set.count(key) > 0;
    for (const auto& u : options.env_unset) drop = drop || u == key;
    if (!drop) env_strings.push_back(kv);
  }
  for (const auto& [k, v] : options.env_set) env_strings.push_back(k + "=" + v);
  std::vector<char*> cenv;
  for (auto& s : env_strings) cenv.push_back(s.data());
  cenv.push_back(nullptr);

  pid_t pid = fork();
  if (pid < 0) return ErrnoError("fork", errno);
  if (pid == 0) {
    dup2(in_pipe[0], 0);
    if (out_pipe[1] >= 0) dup2(out_pipe[1], 1);
    if (err_pipe[1] >= 0) dup2(err_pipe[1], 2);
    CloexecFrom(3);
    if (!options.cwd.empty() && chdir(options.cwd.c_str()) != 0) _exit(127);
    signal(SIGPIPE, SIG_DFL);
    environ = cenv.data();
    execvp(cargv[0], cargv.data());
    _exit(127);
  }
  CloseFd(in_pipe[0]);
  CloseFd(out_pipe[1]);
  CloseFd(err_pipe[1]);

  RunOutput result;
  size_t in_off = 0;
  if (options.stdin_data.empty()) CloseFd(in_pipe[1]);
  else fcntl(in_pipe[1], F_SETFL, O_NONBLOCK);
  auto deadline = options.timeout ? std::chrono::steady_clock::now() + *options.timeout
                                  : std::chrono::steady_clock::time_point::max();
  while (in_pipe[1] >= 0 || out_pipe[0] >= 0 || err_pipe[0] >= 0) {
    pollfd fds[3];
    int n = 0;
    int idx_in = -1, idx_out = -1, idx_err = -1;
    if (in_pipe[1] >= 0) { idx_in = n; fds[n++] = {in_pipe[1], POLLOUT, 0}; }
    if (out_pipe[0] >= 0) { idx_out = n; fds[n++] = {out_pipe[0], POLLIN, 0}; }
    if (err_pipe[0] >= 0) { idx_err = n; fds[n++] = {err_pipe[0], POLLIN, 0}; }
    int wait_ms = -1;
    if (options.timeout) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) {
        kill(pid, SIGKILL);
        result.timed_out = true;
        break;
      }
      wait_ms = static_cast<int>(left.count());
    }
    int r = poll(fds, n, wait_ms);
    if (r < 0) {
      if (errno == EINTR) continue;
      kill(pid, SIGKILL);
      break;
    }
    char buf[65536];
    if (idx_in >= 0 && fds[idx_in].revents) {
      ssize_t w = WriteWithoutSigpipe(in_pipe[1], options.stdin_data.data() + in_off,
                                      options.stdin_data.size() - in_off);
      if (w > 0) in_off += static_cast<size_t>(w);
      if (w < 0 && errno != EAGAIN && errno != EINTR) CloseFd(in_pipe[1]);
      if (in_off >= options.stdin_data.size()) CloseFd(in_pipe[1]);
    }
    auto drain = [&](int idx, int& fd, std::string& sink) {
      if (idx < 0 || !fds[idx].revents) return;
      ssize_t got = read(fd, buf, sizeof(buf));
      if (got > 0) sink.append(buf, static_cast<size_t>(got));
      else if (got == 0 || (errno != EINTR && errno != EAGAIN)) CloseFd(fd);
    };
    drain(idx_out, out_pipe[0], result.out);
    drain(idx_err, err_pipe[0], result.err);
    if (options.max_output && result.out.size() + result.err.size() > options.max_output) {
      kill(pid, SIGKILL);
      result.output_truncated = true;
      break;
    }
  }
  CloseFd(in_pipe[1]);
  CloseFd(out_pipe[0]);
  CloseFd(err_pipe[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return ErrnoError("waitpid", errno);
  }
  if (WIFEXITED(status)) result.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) result.term_signal = WTERMSIG(status);
  return result;
}

Result<RunOutput> RunProcessChecked(const std::vector<std::string>& argv, const RunOptions& options) {
  ASSIGN_OR_RETURN(RunOutput out, RunProcess(argv, options));
  if (out.timed_out) {
    return Error(ErrorCode::kUnavailable, argv[0] + " timed out");
  }
  if (out.output_truncated) {
    return Error(ErrorCode::kIo, argv[0] + " wrote more than " + std::to_string(options.max_output) + " bytes");
  }
  if (!out.success()) {
    std::string last = Trim(out.err);
    size_t nl = last.rfind('\n');
    if (nl != std::string::npos) last = last.substr(nl + 1);
    // A full disk is often reported on an earlier line than the last (tar says "Cannot write:
    // No space left on device", then dpkg-deb says only that tar failed): name it.
    ErrorCode code = ErrorCode::kIo;
    size_t nospace = out.err.find("No space left");
    if (nospace != std::string::npos) {
      code = ErrorCode::kNoSpace;
      if (last.find("No space left") == std::string::npos) {
        size_t b = out.err.rfind('\n', nospace);
        size_t e = out.err.find('\n', nospace);
        b = b == std::string::npos ? 0 : b + 1;
        last = Trim(out.err.substr(b, e == std::string::npos ? std::string::npos : e - b)) + " | " +
               last;
      }
    }
    std::string how = out.term_signal ? "killed by signal " + std::to_string(out.term_signal)
                                      : "exited with " + std::to_string(out.exit_code);
    return Error(code, argv[0] + " " + how + (last.empty() ? "" : ": " + last));
  }
  return out;
}

}  // namespace cloister
