#include "guest/exec_server.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "channel/exec_proto.h"
#include "guest/spawn.h"
#include "guest/users.h"

namespace cloister::guest {

using channel::ExecDecoder;
using channel::ExecExit;
using channel::ExecMsg;

std::vector<std::string> CommandEnv(const UserInfo& user,
                                    const std::map<std::string, std::string>& base_env,
                                    const std::map<std::string, std::string>& extra,
                                    const std::string& term) {
  std::map<std::string, std::string> env = {{"HOME", user.home},   {"USER", user.name},
                                            {"LOGNAME", user.name}, {"SHELL", user.shell},
                                            {"PATH", kDefaultPath}};
  if (!term.empty()) env["TERM"] = term;
  for (const auto& [k, v] : base_env) env[k] = v;
  for (const auto& [k, v] : extra) env[k] = v;
  std::vector<std::string> out;
  for (const auto& [k, v] : env) out.push_back(k + "=" + v);
  return out;
}

namespace {

constexpr size_t kOutCap = 256 * 1024;

class Session {
 public:
  Session(int fd, const ExecServerOptions& opt) : fd_(fd), opt_(opt) {}

  void Run() {
    fcntl(fd_, F_SETFL, fcntl(fd_, F_GETFL) | O_NONBLOCK);
    auto req = ReadRequest();
    if (!req) return;
    if (!Start(*req)) return;
    Relay();
  }

 private:
  void Queue(ExecMsg type, std::string_view payload) {
    channel::EncodeExecMessage(type, payload, out_);
  }

  // Blocking flush of everything queued (used at the end).
  void Flush() {
    while (off_ < out_.size()) {
      ssize_t n = send(fd_, out_.data() + off_, out_.size() - off_, MSG_NOSIGNAL);
      if (n < 0 && errno == EAGAIN) {
        pollfd p{fd_, POLLOUT, 0};
        poll(&p, 1, 5000);
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return;
      off_ += static_cast<size_t>(n);
    }
  }

  void SendError(const std::string& text) {
    Queue(ExecMsg::kError, text.substr(0, channel::kExecMaxText));
    Flush();
  }

  std::optional<channel::ExecRequest> ReadRequest() {
    char buf[65536];
    while (true) {
      auto m = dec_.Next();
      if (!m.ok()) {
        SendError(m.error().message());
        return std::nullopt;
      }
      if (m->has_value()) {
        if ((*m)->type != ExecMsg::kRequest) {
          SendError("the first exec message must be the request");
          return std::nullopt;
        }
        auto r = channel::ParseExecRequest((*m)->payload);
        if (!r.ok()) {
          SendError(r.error().message());
          return std::nullopt;
        }
        return *r;
      }
      pollfd p{fd_, POLLIN, 0};
      if (poll(&p, 1, 30000) <= 0) return std::nullopt;  // host never sent a request
      ssize_t n = read(fd_, buf, sizeof buf);
      if (n <= 0) return std::nullopt;
      dec_.Feed(std::string_view(buf, static_cast<size_t>(n)));
    }
  }

  bool Start(const channel::ExecRequest& req) {
    auto user = LookupUser(req.user, opt_.passwd_path, opt_.group_path);
    if (!user.ok()) {
      SendError(user.error().message());
      return false;
    }
    tty_ = req.tty;
    SpawnSpec spec;
    spec.env = CommandEnv(*user, opt_.base_env, req.env, req.tty ? req.term : "");
    if (req.argv.empty()) {
      spec.argv = {user->shell};
      std::string base = user->shell.substr(user->shell.rfind('/') + 1);
      spec.argv0 = "-" + base;  // a login shell
    } else {
      spec.argv = req.argv;
    }
    spec.cwd = req.cwd.empty() ? user->home : req.cwd;
    if (opt_.switch_user) spec.user = *user;
    spec.tty = req.tty;
    spec.rows = req.rows;
    spec.cols = req.cols;
    auto child = Spawn(spec);
    if (!child.ok()) {
      // Shell conventions: 127 command not found, 126 not executable.
      if (child.error().code() == ErrorCode::kNotFound ||
          child.error().code() == ErrorCode::kPermissionDenied) {
        std::string why = child.error().message();
        // `cloister attach` on an image without tmux: say what to add (never a hang).
        if (child.error().code() == ErrorCode::kNotFound && spec.argv[0] == "tmux") {
          why = "this workspace's image has no tmux, which `cloister attach` needs: add tmux to "
                "the image (apt-get install tmux, apk add tmux) and rebuild it, or use "
                "`cloister exec NAME -- sh`";
        }
        Queue(ExecMsg::kStderr, "cloister: " + why + "\n");
        ExecExit e;
        e.value = child.error().code() == ErrorCode::kNotFound ? 127 : 126;
        Queue(ExecMsg::kExit, channel::EncodeExit(e));
        Flush();
        return false;
      }
      SendError(child.error().message());
      return false;
    }
    child_ = *child;
    if (tty_) {
      out_fd_ = child_.master;
    } else {
      out_fd_ = child_.out;
      err_fd_ = child_.err;
      in_fd_ = child_.in;
    }
    return true;
  }

  void Signal(int signo) {
    pid_t target = -child_.pid;  // the command's process group (it is a session leader)
    if (tty_ && child_.master >= 0) {
      pid_t fg = tcgetpgrp(child_.master);
      if (fg > 0) target = -fg;
    }
    if (kill(target, signo) != 0) kill(child_.pid, signo);
  }

  void HandleMessage(const channel::ExecMessage& m) {
    switch (m.type) {
      case ExecMsg::kStdin:
        if (!stdin_closed_) inbuf_ += m.payload;
        break;
      case ExecMsg::kStdinEof:
        stdin_eof_ = true;
        break;
      case ExecMsg::kResize:
        if (tty_ && child_.master >= 0) {
          auto rc = channel::ParseResize(m.payload);
          if (rc.ok()) {
            winsize ws{};
            ws.ws_row = rc->first;
            ws.ws_col = rc->second;
            ioctl(child_.master, TIOCSWINSZ, &ws);  // the kernel sends SIGWINCH
          }
        }
        break;
      case ExecMsg::kSignal: {
        auto s = channel::ParseSignal(m.payload);
        if (s.ok() && !exited_) Signal(*s);
        break;
      }
      default:
        break;
    }
  }

  // Reads what the child wrote; false at EOF (or EIO on a pty whose slave is closed).
  bool Drain(int fd, ExecMsg type) {
    char buf[channel::kExecMaxData];
    ssize_t n = read(fd, buf, sizeof buf);
    if (n > 0) {
      Queue(type, std::string_view(buf, static_cast<size_t>(n)));
      return true;
    }
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) return true;
    return false;
  }

  void Relay() {
    using Clock = std::chrono::steady_clock;
    Clock::time_point exit_deadline{};
    bool host_gone = false;
    char buf[65536];
    // Messages that arrived together with the request.
    while (true) {
      auto m = dec_.Next();
      if (!m.ok() || !m->has_value()) break;
      HandleMessage(**m);
    }
    while (true) {
      // Done when the child exited and its output is drained (or the grace period is over:
      // a background process may keep the pipes open).
      if (exited_ && ((out_fd_ < 0 && err_fd_ < 0) || Clock::now() >= exit_deadline)) break;
      if (host_gone && exited_) break;
      if (stdin_eof_ && inbuf_.empty() && in_fd_ >= 0) {
        close(in_fd_);
        in_fd_ = -1;
        stdin_closed_ = true;
      }
      std::vector<pollfd> p;
      p.push_back({fd_, static_cast<short>((host_gone ? 0 : POLLIN) |
                                           (off_ < out_.size() ? POLLOUT : 0)),
                   0});
      int i_out = -1, i_err = -1, i_in = -1, i_pid = -1;
      bool room = out_.size() - off_ < kOutCap;
      if (out_fd_ >= 0 && room) { i_out = static_cast<int>(p.size()); p.push_back({out_fd_, POLLIN, 0}); }
      if (err_fd_ >= 0 && room) { i_err = static_cast<int>(p.size()); p.push_back({err_fd_, POLLIN, 0}); }
      int in_target = tty_ ? child_.master : in_fd_;
      if (in_target >= 0 && !inbuf_.empty() && !stdin_closed_) {
        i_in = static_cast<int>(p.size());
        p.push_back({in_target, POLLOUT, 0});
      }
      if (!exited_ && child_.pidfd >= 0) { i_pid = static_cast<int>(p.size()); p.push_back({child_.pidfd, POLLIN, 0}); }
      int timeout = -1;
      if (exited_) {
        timeout = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                       exit_deadline - Clock::now()).count()) + 1;
      } else if (child_.pidfd < 0) {
        timeout = 100;  // no pidfd: poll waitpid
      }
      if (poll(p.data(), p.size(), timeout) < 0 && errno != EINTR) break;
      // Host stream.
      if (p[0].revents & POLLOUT) {
        ssize_t n = send(fd_, out_.data() + off_, out_.size() - off_, MSG_NOSIGNAL);
        if (n > 0) off_ += static_cast<size_t>(n);
        if (n < 0 && errno != EAGAIN && errno != EINTR) host_gone = true;
        if (off_ == out_.size()) { out_.clear(); off_ = 0; }
      }
      if (!host_gone && (p[0].revents & (POLLIN | POLLHUP | POLLERR))) {
        ssize_t n = read(fd_, buf, sizeof buf);
        if (n > 0) {
          dec_.Feed(std::string_view(buf, static_cast<size_t>(n)));
          while (true) {
            auto m = dec_.Next();
            if (!m.ok() || !m->has_value()) break;
            HandleMessage(**m);
          }
        } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
          // The host went away (client killed): hang up the command like a closed terminal.
          host_gone = true;
          if (!exited_) Signal(SIGHUP);
        }
      }
      // Child output.
      if (i_out >= 0 && (p[i_out].revents & (POLLIN | POLLHUP | POLLERR))) {
        if (!Drain(out_fd_, ExecMsg::kStdout)) {
          close(out_fd_);
          if (tty_) child_.master = -1;  // the same fd
          out_fd_ = -1;
        }
      }
      if (i_err >= 0 && (p[i_err].revents & (POLLIN | POLLHUP | POLLERR))) {
        if (!Drain(err_fd_, ExecMsg::kStderr)) { close(err_fd_); err_fd_ = -1; }
      }
      // Child input.
      if (i_in >= 0 && (p[i_in].revents & (POLLOUT | POLLERR | POLLHUP))) {
        ssize_t n = write(in_target, inbuf_.data(), inbuf_.size());
        if (n > 0) inbuf_.erase(0, static_cast<size_t>(n));
        if (n < 0 && errno != EAGAIN && errno != EINTR) { inbuf_.clear(); stdin_closed_ = true; }
      }
      // Child exit.
      if (!exited_ && (child_.pidfd < 0 || (i_pid >= 0 && (p[i_pid].revents & POLLIN)))) {
        int status = 0;
        pid_t r = waitpid(child_.pid, &status, WNOHANG);
        if (r == child_.pid) {
          exited_ = true;
          exit_.signaled = WIFSIGNALED(status);
          exit_.value = exit_.signaled ? WTERMSIG(status) : WEXITSTATUS(status);
          exit_deadline = Clock::now() + std::chrono::seconds(2);
          if (in_fd_ >= 0) { close(in_fd_); in_fd_ = -1; }
        }
      }
    }
    // Whatever is still readable right now goes out before EXIT.
    for (int* fd : {&out_fd_, &err_fd_}) {
      if (*fd < 0) continue;
      ExecMsg type = fd == &out_fd_ ? ExecMsg::kStdout : ExecMsg::kStderr;
      for (int i = 0; i < 64; ++i) {
        char b[channel::kExecMaxData];
        ssize_t n = read(*fd, b, sizeof b);
        if (n <= 0) break;
        Queue(type, std::string_view(b, static_cast<size_t>(n)));
      }
      close(*fd);
      *fd = -1;
    }
    if (tty_) child_.master = -1;
    if (in_fd_ >= 0) close(in_fd_);
    if (child_.pidfd >= 0) close(child_.pidfd);
    if (!exited_) {  // host gone before the child ended: it got SIGHUP; reap it in background
      pid_t pid = child_.pid;
      std::thread([pid] { int st; waitpid(pid, &st, 0); }).detach();
      return;
    }
    Queue(ExecMsg::kExit, channel::EncodeExit(exit_));
    Flush();
  }

  int fd_;
  const ExecServerOptions& opt_;
  ExecDecoder dec_{/*from_guest=*/false};
  std::string out_;
  size_t off_ = 0;
  std::string inbuf_;
  bool stdin_eof_ = false;
  bool stdin_closed_ = false;
  bool tty_ = false;
  Spawned child_;
  int out_fd_ = -1, err_fd_ = -1, in_fd_ = -1;
  bool exited_ = false;
  ExecExit exit_;
};

}  // namespace

void ServeExec(int fd, const ExecServerOptions& options) {
  Session s(fd, options);
  s.Run();
  close(fd);
}

}  // namespace cloister::guest
