// The host-guest channel multiplexer: many byte streams over one ordered byte pipe (the
// virtio-serial port `org.cloister.channel.0`; a socketpair in tests).
//
// Model (like SSH channels): either side opens a stream to a named service of the other side;
// the receiving side accepts only services it registered (anything else gets OPEN_FAIL). Each
// stream is bridged to a local connected socket fd, so a service is just "handle a connected fd".
// Per-stream credit-based flow control (kInitialWindow bytes, replenished by WINDOW frames as the
// local fd consumes data) means a slow reader on one stream never blocks the others and never
// grows memory past `max_streams * kInitialWindow` plus a bounded output queue.
//
// Sessions: the host sends HELLO(session id) until the guest answers with the same id; bytes
// before that are stale (an earlier connection) and skipped, at most 16 MiB. A guest that gets a
// HELLO with a new id resets all its streams and answers: the host side restarted. A protocol
// error on the guest side resynchronises on the next HELLO instead of ending the loop.
//
// Threading: Start() runs the event loop (poll) on a thread the Mux owns. All public methods are
// thread-safe. Callbacks (service handlers, OpenAsync completions, on_ready, on_closed) run on the
// loop thread: they must not block and must not call Open() (use OpenAsync from there).
//
// SECURITY: the peer is hostile on the host side. Any protocol violation (bad frame, DATA beyond
// the window, a frame for a stream that does not exist, a wrong stream-id parity, ...) closes the
// whole channel (fail closed) and reports the reason through on_closed and the log.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"

namespace cloister::channel {

enum class MuxRole {
  kHost,   // opens odd stream ids; receives READY
  kGuest,  // opens even stream ids; sends READY
};

// Handles an accepted stream. Owns `fd` (a connected, non-blocking-agnostic SOCK_STREAM socket,
// close-on-exec) from now on. `args` are the opener's bounded OPEN arguments (hostile on the host).
using ServiceHandler = std::function<void(int fd, const std::vector<std::string>& args)>;

// Why the Mux ended an accepted stream's local end, when it was not the peer's orderly EOF: the
// peer sent CLOSE without EOF (its own local connection failed: a guest client's reset), or the
// channel ended. Set before the Mux closes or shuts the fd, so a service that saw its fd end (EOF,
// a failed write) and asks afterwards reads it. Thread safe.
class StreamEnd {
 public:
  enum class Reason { kNone, kReset, kChannelClosed };
  Reason reason() const { return reason_.load(); }
  void Set(Reason r) {
    Reason none = Reason::kNone;
    reason_.compare_exchange_strong(none, r);
  }

 private:
  std::atomic<Reason> reason_{Reason::kNone};
};

// A ServiceHandler that also gets its stream's StreamEnd.
using StreamServiceHandler = std::function<void(int fd, const std::vector<std::string>& args,
                                                std::shared_ptr<const StreamEnd> end)>;

struct MuxOptions {
  MuxRole role = MuxRole::kHost;
  // Host: the session id sent in HELLO; 0 picks a random one (tests and fuzzers fix it).
  uint64_t session = 0;
  // Most streams open at once (both directions together): the peer's OPENs beyond it get
  // OPEN_FAIL; our own opens beyond it wait, in order, for a stream to end (none is refused for
  // being one too many: a client whose connection is closed unanswered may wait forever).
  size_t max_streams = 64;
  // Most of our own opens waiting for a stream to end; beyond it an open fails (kBusy).
  size_t max_waiting_opens = 1024;
  // One-line diagnostics (violations, open failures). May be empty.
  std::function<void(std::string_view)> log;
  // Host: called once per channel session when the guest sends READY (info is sanitized text).
  std::function<void(const std::string& info)> on_ready;
  // Called once when the loop ends: OkStatus-like Error code kCancelled for Stop(), kUnavailable
  // when the peer disconnected or said GOAWAY, kCorrupt/kFailedPrecondition for violations.
  std::function<void(const Error& why)> on_closed;
};

struct MuxStats {
  size_t open_streams = 0;
  size_t waiting_opens = 0;      // our opens waiting for a stream to end (max_streams)
  size_t inbound_buffered = 0;   // bytes received and not yet written to local fds
  size_t outbound_buffered = 0;  // bytes queued for the channel fd
  bool ready_received = false;
  bool session_established = false;
  bool closed = false;
};

class Mux {
 public:
  // Takes ownership of `channel_fd` (any connected byte stream: unix socket to QEMU's chardev,
  // the guest's /dev/vportNpM, a socketpair end). It is switched to non-blocking.
  static Result<std::unique_ptr<Mux>> Create(int channel_fd, MuxOptions options);
  ~Mux();  // Stop() + join.

  Mux(const Mux&) = delete;
  Mux& operator=(const Mux&) = delete;

  // Registers `name` before or after Start(). Replaces an existing handler.
  void RegisterService(const std::string& name, ServiceHandler handler);
  void RegisterStreamService(const std::string& name, StreamServiceHandler handler);

  // Sends HELLO and starts the loop thread.
  Status Start();

  // Opens a stream to the peer's `service`, bridged to `local_fd` (ownership passes to the Mux,
  // even on failure). `done` runs on the loop thread with OkStatus or the OPEN_FAIL reason.
  void OpenAsync(const std::string& service, std::vector<std::string> args, int local_fd,
                 std::function<void(Status)> done);

  // Blocking convenience: creates a socketpair, opens the stream, and returns the caller's end
  // once the peer accepted it (kUnavailable with the peer's reason, or on timeout/closed channel).
  // Never call from a loop callback.
  Result<int> Open(const std::string& service, std::vector<std::string> args,
                   std::chrono::milliseconds timeout = std::chrono::seconds(30));

  // Guest: tells the host that a real terminal works. The Mux remembers it and sends READY again
  // in every later session (a new host connection after resume or a supervisor restart).
  void SendReady(const std::string& info);

  // Sends GOAWAY, closes every stream and the channel, joins the loop. Idempotent.
  void Stop();
  // Blocks until the loop ended (peer gone, violation or Stop) and returns why.
  Error Wait();
  // Waits at most `timeout`; true if the loop ended.
  bool WaitFor(std::chrono::milliseconds timeout);

  MuxStats Stats() const;

  class Impl;

 private:
  explicit Mux(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace cloister::channel
