#include "channel/exec_client.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <termios.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <optional>
#include <string>

namespace cloister::channel {
namespace {

constexpr size_t kOutCap = 256 * 1024;

// Writes all of `data` to a possibly non-blocking fd. False on a hard error (EPIPE...).
bool WriteFully(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN) {
        pollfd p{fd, POLLOUT, 0};
        poll(&p, 1, -1);
        continue;
      }
      return false;
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

}  // namespace

ExecControl::ExecControl() {
  if (pipe2(fds_, O_CLOEXEC | O_NONBLOCK) != 0) fds_[0] = fds_[1] = -1;
}

ExecControl::~ExecControl() {
  if (fds_[0] >= 0) close(fds_[0]);
  if (fds_[1] >= 0) close(fds_[1]);
}

// Records are 5 bytes: 'R' rows(2) cols(2), 'S' signo (low byte last) or 'A' signo (abort).
void ExecControl::Resize(uint16_t rows, uint16_t cols) {
  char rec[5] = {'R', static_cast<char>(rows >> 8), static_cast<char>(rows),
                 static_cast<char>(cols >> 8), static_cast<char>(cols)};
  ssize_t r = write(fds_[1], rec, sizeof rec);
  (void)r;
}

void ExecControl::Abort(int signo) {
  char rec[5] = {'A', 0, 0, 0, static_cast<char>(signo)};
  ssize_t r = write(fds_[1], rec, sizeof rec);
  (void)r;
}

void ExecControl::Signal(int signo) {
  char rec[5] = {'S', 0, 0, 0, static_cast<char>(signo)};
  ssize_t r = write(fds_[1], rec, sizeof rec);
  (void)r;
}

Result<ExecExit> RunExec(int stream_fd, const ExecRequest& request, const ExecIo& io,
                         ExecControl* control) {
  std::string outbuf;
  size_t out_off = 0;
  EncodeExecMessage(ExecMsg::kRequest, EncodeExecRequest(request), outbuf);
  bool stdin_done = io.in < 0;
  if (stdin_done) EncodeExecMessage(ExecMsg::kStdinEof, "", outbuf);
  int flags = fcntl(stream_fd, F_GETFL);
  if (flags < 0 || fcntl(stream_fd, F_SETFL, flags | O_NONBLOCK) != 0) {
    return ErrnoError("exec stream", errno);
  }
  ExecDecoder decoder(/*from_guest=*/true);
  std::string ctl_partial;
  // Set by a forwarded SIGTERM/SIGHUP: when it passes, the session is closed (ExecControl).
  std::optional<std::chrono::steady_clock::time_point> give_up;
  int give_up_signal = 0;
  auto cancelled = [&](int signo) {
    if (control) control->set_ended_by_signal(signo);
    // Best effort: what is queued (the forwarded signal) still goes out before we close.
    if (out_off < outbuf.size()) {
      (void)!send(stream_fd, outbuf.data() + out_off, outbuf.size() - out_off,
                  MSG_NOSIGNAL | MSG_DONTWAIT);
    }
    return Error(ErrorCode::kCancelled,
                 "interrupted by signal " + std::to_string(signo) +
                     ": the session was closed before the command exited",
                 "the command may still run in the guest; `cloister ls` shows the VM's state");
  };
  char buf[kExecMaxData];
  bool out_broken = false;
  while (true) {
    pollfd p[3];
    int n = 0;
    short sev = POLLIN;
    if (out_off < outbuf.size()) sev |= POLLOUT;
    p[n++] = {stream_fd, sev, 0};
    int in_idx = -1, ctl_idx = -1;
    if (!stdin_done && outbuf.size() - out_off < kOutCap) {
      in_idx = n;
      p[n++] = {io.in, POLLIN, 0};
    }
    if (control && control->read_fd() >= 0) {
      ctl_idx = n;
      p[n++] = {control->read_fd(), POLLIN, 0};
    }
    int wait_ms = -1;
    if (give_up) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          *give_up - std::chrono::steady_clock::now());
      wait_ms = static_cast<int>(std::max<int64_t>(0, left.count()));
    }
    if (poll(p, n, wait_ms) < 0) {
      if (errno == EINTR) continue;
      return ErrnoError("poll", errno);
    }
    if (give_up && std::chrono::steady_clock::now() >= *give_up) return cancelled(give_up_signal);
    if (p[0].revents & POLLOUT) {
      ssize_t w = send(stream_fd, outbuf.data() + out_off, outbuf.size() - out_off, MSG_NOSIGNAL);
      if (w > 0) out_off += static_cast<size_t>(w);
      if (w < 0 && errno != EAGAIN && errno != EINTR) {
        return Error(ErrorCode::kUnavailable, "exec stream closed while sending");
      }
      if (out_off == outbuf.size()) {
        outbuf.clear();
        out_off = 0;
      }
    }
    if (p[0].revents & (POLLIN | POLLHUP | POLLERR)) {
      ssize_t r = read(stream_fd, buf, sizeof buf);
      if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR)) {
        return Error(ErrorCode::kUnavailable, "exec stream ended before the command exited",
                     "the guest agent may have restarted; see the workspace's serial log");
      }
      if (r > 0) decoder.Feed(std::string_view(buf, static_cast<size_t>(r)));
      while (true) {
        auto m = decoder.Next();
        if (!m.ok()) return m.error().WithContext("malformed exec message from the guest");
        if (!m->has_value()) break;
        ExecMessage& msg = **m;
        switch (msg.type) {
          case ExecMsg::kStdout:
          case ExecMsg::kStderr: {
            int fd = msg.type == ExecMsg::kStdout ? io.out : io.err;
            if (!out_broken && fd >= 0 && !WriteFully(fd, msg.payload)) out_broken = true;
            break;
          }
          case ExecMsg::kExit:
            return ParseExit(msg.payload);
          case ExecMsg::kError: {
            std::string text;
            for (char c : msg.payload) text.push_back((c >= 0x20 && c < 0x7f) ? c : '?');
            return Error(ErrorCode::kFailedPrecondition, "guest could not run the command: " + text);
          }
          default:
            return Error(ErrorCode::kCorrupt, "unexpected exec message from the guest");
        }
      }
    }
    // The control pipe is read on every round, before stdin, and without waiting for its
    // revents: a SIGWINCH handler that ran as poll returned must reach the guest before the
    // keystrokes that followed the resize.
    if (ctl_idx >= 0) {
      char rec[64];
      ssize_t r = read(control->read_fd(), rec, sizeof rec);
      if (r > 0) ctl_partial.append(rec, static_cast<size_t>(r));
      while (ctl_partial.size() >= 5) {
        auto* b = reinterpret_cast<const unsigned char*>(ctl_partial.data());
        if (b[0] == 'R') {
          EncodeExecMessage(ExecMsg::kResize,
                            EncodeResize(static_cast<uint16_t>((b[1] << 8) | b[2]),
                                         static_cast<uint16_t>((b[3] << 8) | b[4])),
                            outbuf);
        } else if (b[0] == 'S') {
          EncodeExecMessage(ExecMsg::kSignal, EncodeSignal(b[4]), outbuf);
          if ((b[4] == SIGTERM || b[4] == SIGHUP) && !give_up) {
            give_up = std::chrono::steady_clock::now() + control->signal_grace();
            give_up_signal = b[4];
          }
        } else if (b[0] == 'A') {
          return cancelled(b[4]);
        }
        ctl_partial.erase(0, 5);
      }
    }
    if (in_idx >= 0 && (p[in_idx].revents & (POLLIN | POLLHUP | POLLERR))) {
      ssize_t r = read(io.in, buf, sizeof buf);
      if (r > 0) {
        EncodeExecMessage(ExecMsg::kStdin, std::string_view(buf, static_cast<size_t>(r)), outbuf);
      } else if (r == 0 || (errno != EAGAIN && errno != EINTR)) {
        stdin_done = true;
        EncodeExecMessage(ExecMsg::kStdinEof, "", outbuf);
      }
    }
  }
}

namespace {

std::atomic<ExecControl*> g_control{nullptr};
std::atomic<int> g_interrupts{0};

void ForwardSignal(int signo) {
  int saved = errno;
  ExecControl* c = g_control.load();
  if (c) {
    if (signo == SIGWINCH) {
      winsize ws{};
      if (ioctl(STDIN_FILENO, TIOCGWINSZ, &ws) == 0) c->Resize(ws.ws_row, ws.ws_col);
    } else if (g_interrupts.fetch_add(1) >= 1) {
      c->Abort(signo);  // the second interrupt: the user wants out now
    } else {
      c->Signal(signo);
    }
  }
  errno = saved;
}

}  // namespace

Result<int> RunExecInTerminal(int stream_fd, ExecRequest request, bool interactive) {
  bool raw = false;
  termios saved{};
  if (request.tty && isatty(STDIN_FILENO)) {
    winsize ws{};
    if (ioctl(STDIN_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_row && ws.ws_col) {
      request.rows = ws.ws_row;
      request.cols = ws.ws_col;
    }
    if (const char* term = getenv("TERM"); term && *term) request.term = term;
    if (interactive && tcgetattr(STDIN_FILENO, &saved) == 0) {
      termios r = saved;
      cfmakeraw(&r);
      raw = tcsetattr(STDIN_FILENO, TCSANOW, &r) == 0;
    }
  }
  ExecControl control;
  g_interrupts.store(0);
  g_control.store(&control);
  const int kSignals[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGWINCH};
  struct sigaction old[5];
  for (int i = 0; i < 5; ++i) {
    struct sigaction sa {};
    sa.sa_handler = ForwardSignal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(kSignals[i], &sa, &old[i]);
  }
  ExecIo io;
  io.in = interactive ? STDIN_FILENO : -1;
  auto result = RunExec(stream_fd, request, io, &control);
  for (int i = 0; i < 5; ++i) sigaction(kSignals[i], &old[i], nullptr);
  g_control.store(nullptr);
  if (raw) tcsetattr(STDIN_FILENO, TCSANOW, &saved);
  if (!result.ok() && result.error().code() == ErrorCode::kCancelled && control.ended_by_signal()) {
    std::string line = "cloister: " + result.error().ToString() + "\n";
    (void)!write(STDERR_FILENO, line.data(), line.size());
    return 128 + control.ended_by_signal();
  }
  if (!result.ok()) return result.error();
  return result->ShellCode();
}

ExecRequest AttachRequest() {
  ExecRequest r;
  r.argv = {"tmux", "new-session", "-A", "-s", kTmuxSession};
  r.user = protocol::kGuestUser;
  r.tty = true;
  return r;
}

Result<int> RunAttach(int stream_fd) {
  if (!isatty(STDIN_FILENO)) {
    return Error(ErrorCode::kFailedPrecondition, "attach needs a terminal on stdin",
                 "use `cloister exec NAME -- CMD` from scripts");
  }
  return RunExecInTerminal(stream_fd, AttachRequest(), /*interactive=*/true);
}

}  // namespace cloister::channel
