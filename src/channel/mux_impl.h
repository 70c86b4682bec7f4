// Mux::Impl, the channel's loop behind channel/mux.h: one thread owns the channel fd and every
// stream's local fd; other threads only post commands to it. Its parts: mux.cc (setup, the public
// calls, the loop and its end), mux_session.cc (HELLO, the session, opens), mux_streams.cc (frames
// from the peer, the channel's and the streams' reads and writes).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "channel/frame.h"
#include "channel/mux.h"

namespace cloister::channel {

class Mux::Impl {
  // Stop reading local fds while this much is queued for the channel.
  static constexpr size_t kOutboundSoftCap = 256 * 1024;
  // Stop reading the channel itself while this much is queued (bounds the replies a peer can
  // provoke without reading them).
  static constexpr size_t kOutboundHardCap = 1024 * 1024;
  static constexpr size_t kReadChunk = 64 * 1024;
  // Stale bytes skipped while waiting for the peer's HELLO before giving up.
  static constexpr size_t kMaxPreHelloBytes = 16 * 1024 * 1024;
  // The host's HELLO is re-sent until answered: after 25 ms, then twice as long each time, at most
  // 500 ms apart. A resumed guest, or one whose port dropped the first, answers within a few ms of
  // seeing one; a fixed 500 ms made the first exec after a resume wait for the resend.
  static constexpr auto kHelloResendFirst = std::chrono::milliseconds(25);
  static constexpr auto kHelloResend = std::chrono::milliseconds(500);

  struct Stream {
    int fd = -1;
    bool opening = false;          // we sent OPEN, waiting for OPEN_OK / OPEN_FAIL
    bool local_eof = false;        // read 0 from fd and sent EOF
    bool remote_eof = false;       // peer sent EOF
    bool wr_shut = false;          // shutdown(SHUT_WR) done on fd
    bool close_sent = false;
    bool close_received = false;
    uint32_t send_credit = kInitialWindow;  // DATA bytes we may still send
    uint32_t recv_allowed = kInitialWindow; // DATA bytes the peer may still send
    uint32_t consumed_unacked = 0;          // written to fd, not yet returned as WINDOW
    std::string inbuf;
    size_t in_off = 0;
    std::function<void(Status)> open_done;
    std::shared_ptr<StreamEnd> end;  // streams the peer opened: what their service may ask

    size_t pending_in() const { return inbuf.size() - in_off; }
  };

  static uint64_t RandomSession();
  static Status SetNonBlocking(int fd);
  // send() with MSG_NOSIGNAL on sockets (no SIGPIPE), write() on anything else (virtio ports).
  static ssize_t WriteSome(int fd, const char* data, size_t len);

 public:
  Impl(int fd, MuxOptions options) : chan_fd_(fd), opt_(std::move(options)) {
    next_id_ = FirstId();
    if (opt_.role == MuxRole::kHost) {
      session_ = opt_.session ? opt_.session : RandomSession();
      SendHello();
    }
  }

  ~Impl() {
    Stop();
    if (wake_fd_ >= 0) close(wake_fd_);
  }

  Status Init();

  void RegisterService(const std::string& name, StreamServiceHandler handler);

  Status Start();

  // Runs `fn` on the loop thread; once the loop has ended, runs it here (against the failed
  // state, so opens fail at once instead of hanging).
  void Post(std::function<void()> fn);

  void OpenAsync(const std::string& service, std::vector<std::string> args, int local_fd,
                 std::function<void(Status)> done);

  void SendReady(const std::string& info);

  void Stop();

  Error Wait();

  bool WaitFor(std::chrono::milliseconds timeout);

  MuxStats Stats();

 private:
  void Wake();

  void Log(const std::string& line);

  void Queue(FrameType type, uint32_t stream, std::string_view payload);

  uint32_t FirstId() const { return opt_.role == MuxRole::kHost ? 1 : 2; }

  void SendHello();

  // The session is up: run deferred opens, repeat READY.
  void Establish();

  // Guest: forget every stream of the previous session (their local sockets see EOF).
  void ResetStreams(const std::string& why);

  // Ends every stream (its local fd closed, its end told the channel closed); the open callbacks
  // of those still opening, for the caller to fail.
  std::vector<std::function<void(Status)>> DropStreams();

  void StartGuestSession(uint64_t session);

  // Looks for the peer's HELLO in scan_buf_, skipping stale bytes; then feeds the rest on.
  void TrySync();

  bool OursId(uint32_t id) const { return (id % 2 == 1) == (opt_.role == MuxRole::kHost); }

  // `queued`: the open comes from the front of waiting_opens_ (it goes before those behind it).
  void DoOpen(const std::string& service, std::vector<std::string> args, int local_fd,
              std::function<void(Status)> done, bool queued = false);

  // Opens that waited for a free stream, as streams end.
  void StartWaitingOpens();

  // Closes the channel with `why`; further frames are not processed.
  void Fail(Error why);

  void Violation(const std::string& what);

  void SendClose(uint32_t id, Stream& s);

  void HandleFrame(Frame& f);

  void HandleOpen(Frame& f);

  void ReadChannel();

  void WriteChannel();

  size_t OutPending() const { return outbuf_.size() - out_off_; }

  void ReadLocal(uint32_t id, Stream& s);

  void WriteLocal(uint32_t id, Stream& s);

  // Advances stream state machines after I/O: half-closes, CLOSE exchange, forgetting streams.
  void Sweep();

  void RunCommands();

  void UpdateStats();

  void Loop();

  void Teardown();

  int chan_fd_;
  int wake_fd_ = -1;
  MuxOptions opt_;

  std::mutex mu_;  // guards the fields below up to the blank line
  std::condition_variable cv_;
  std::map<std::string, StreamServiceHandler> services_;
  std::vector<std::function<void()>> commands_;
  bool started_ = false;
  bool stop_requested_ = false;
  bool closed_ = false;
  Error close_error_{ErrorCode::kInternal, ""};
  MuxStats stats_;

  // Loop thread only:
  std::thread thread_;
  FrameDecoder decoder_;
  std::string outbuf_;
  size_t out_off_ = 0;
  std::map<uint32_t, Stream> streams_;
  uint32_t next_id_;
  uint32_t last_peer_id_ = 0;
  bool hello_received_ = false;  // the session is established
  bool resync_ = false;
  bool ready_ = false;
  uint64_t session_ = 0;
  std::string scan_buf_;
  size_t discarded_ = 0;
  std::string ready_info_;
  std::chrono::steady_clock::time_point last_hello_;
  std::chrono::steady_clock::duration hello_resend_ = kHelloResendFirst;
  struct PendingOpen {
    std::string service;
    std::vector<std::string> args;
    int fd;
    std::function<void(Status)> done;
  };
  std::deque<PendingOpen> pending_opens_;  // before the session is established
  std::deque<PendingOpen> waiting_opens_;  // at max_streams: waiting for a stream to end
  std::optional<Error> failure_;
};

}  // namespace cloister::channel
