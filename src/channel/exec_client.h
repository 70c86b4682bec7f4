// Host side of exec: drives one `exec` stream (a connected fd from Mux::Open("exec")).
//
// Used by the CLI verbs `cloister exec` and `cloister attach` (the supervisor opens the stream
// and hands the fd to the CLI process). SECURITY: everything read from the stream is guest
// output: decoded by the bounded ExecDecoder; a malformed message ends the session with kCorrupt.
#pragma once

#include <chrono>
#include <cstdint>

#include "base/result.h"
#include "channel/exec_proto.h"

namespace cloister::channel {

// Injects window-size changes and signals into a running RunExec from other threads or from a
// signal handler (both methods only call write(2), which is async-signal-safe).
class ExecControl {
 public:
  ExecControl();
  ~ExecControl();
  ExecControl(const ExecControl&) = delete;
  ExecControl& operator=(const ExecControl&) = delete;

  void Resize(uint16_t rows, uint16_t cols);
  // Forwards `signo` to the guest command. SIGTERM and SIGHUP also start a grace period: if the
  // command has not exited when it ends, RunExec closes the session (kCancelled), so a guest that
  // cannot answer (frozen, hung agent) never keeps the CLI alive.
  void Signal(int signo);
  // Ends RunExec at once with kCancelled (the session is closed, nothing more is forwarded).
  void Abort(int signo);
  int read_fd() const { return fds_[0]; }
  // The grace period after a forwarded SIGTERM/SIGHUP (default 5 s). Set before RunExec.
  void set_signal_grace(std::chrono::milliseconds grace) { grace_ = grace; }
  std::chrono::milliseconds signal_grace() const { return grace_; }
  // After RunExec returned kCancelled: the signal that closed the session (else 0).
  int ended_by_signal() const { return ended_by_; }
  void set_ended_by_signal(int signo) { ended_by_ = signo; }

 private:
  int fds_[2] = {-1, -1};
  std::chrono::milliseconds grace_{5000};
  int ended_by_ = 0;
};

struct ExecIo {
  int in = -1;   // -1: no stdin (the command sees EOF at once)
  int out = 1;
  int err = 2;
};

// Sends `request`, streams stdin/stdout/stderr until the guest reports EXIT, and returns it.
// Takes no ownership of any fd. Errors: kFailedPrecondition when the guest could not start the
// command (its reason), kUnavailable when the stream ended early, kCorrupt on a protocol error.
Result<ExecExit> RunExec(int stream_fd, const ExecRequest& request, const ExecIo& io,
                         ExecControl* control = nullptr);

// CLI convenience over RunExec with the process's own stdin/stdout/stderr:
// - `interactive` forwards stdin (else the command gets EOF at once, like `docker exec` without -i);
// - with request.tty and a terminal on stdin: raw mode for the session (restored after), initial
//   window size from the terminal, SIGWINCH forwarded as RESIZE;
// - SIGINT, SIGTERM, SIGHUP and SIGQUIT received meanwhile are forwarded to the guest command;
//   a second one closes the session at once, and after a forwarded SIGTERM/SIGHUP the session
//   closes by itself if the command has not exited within the grace period: then the reason is
//   printed on stderr and the code is 128 + that signal, as for a process the signal killed.
// Returns the shell-convention exit code (code, or 128 + signal).
Result<int> RunExecInTerminal(int stream_fd, ExecRequest request, bool interactive);

// `cloister attach`: a pty running `tmux new-session -A -s cloister` as dev. Needs a terminal
// on stdin (kFailedPrecondition otherwise). Detaching (C-b d) ends it with code 0.
ExecRequest AttachRequest();
inline constexpr char kTmuxSession[] = "cloister";
Result<int> RunAttach(int stream_fd);

}  // namespace cloister::channel
