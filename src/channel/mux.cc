#include "channel/mux.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <deque>
#include <future>
#include <mutex>
#include <optional>
#include <thread>

#include "channel/frame.h"

namespace cloister::channel {
namespace {

// Stop reading local fds while this much is queued for the channel.
constexpr size_t kOutboundSoftCap = 256 * 1024;
// Stop reading the channel itself while this much is queued (bounds the replies a peer can
// provoke without reading them).
constexpr size_t kOutboundHardCap = 1024 * 1024;
constexpr size_t kReadChunk = 64 * 1024;
// Stale bytes skipped while waiting for the peer's HELLO before giving up.
constexpr size_t kMaxPreHelloBytes = 16 * 1024 * 1024;
// The host's HELLO is re-sent until answered: after 25 ms, then twice as long each time, at most
// 500 ms apart. A resumed guest, or one whose port dropped the first, answers within a few ms of
// seeing one; a fixed 500 ms made the first exec after a resume wait for the resend.
constexpr auto kHelloResendFirst = std::chrono::milliseconds(25);
constexpr auto kHelloResend = std::chrono::milliseconds(500);

uint64_t RandomSession() {
  uint64_t v = 0;
  if (getrandom(&v, sizeof v, 0) != sizeof v || v == 0) {
    v = static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()) | 1;
  }
  return v;
}

Status SetNonBlocking(int fd) {
  int flags = fcntl(fd, F_GETFL);
  if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0) return ErrnoError("fcntl", errno);
  return OkStatus();
}

// send() with MSG_NOSIGNAL on sockets (no SIGPIPE), write() on anything else (virtio ports).
ssize_t WriteSome(int fd, const char* data, size_t len) {
  ssize_t n = send(fd, data, len, MSG_NOSIGNAL);
  if (n < 0 && errno == ENOTSOCK) n = write(fd, data, len);
  return n;
}

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

}  // namespace

class Mux::Impl {
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

  Status Init() {
    RETURN_IF_ERROR(SetNonBlocking(chan_fd_));
    wake_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (wake_fd_ < 0) return ErrnoError("eventfd", errno);
    return OkStatus();
  }

  void RegisterService(const std::string& name, StreamServiceHandler handler) {
    std::lock_guard<std::mutex> l(mu_);
    services_[name] = std::move(handler);
  }

  Status Start() {
    std::lock_guard<std::mutex> l(mu_);
    if (started_) return Error(ErrorCode::kFailedPrecondition, "channel already started");
    started_ = true;
    thread_ = std::thread([this] { Loop(); });
    return OkStatus();
  }

  // Runs `fn` on the loop thread; once the loop has ended, runs it here (against the failed
  // state, so opens fail at once instead of hanging).
  void Post(std::function<void()> fn) {
    {
      std::unique_lock<std::mutex> l(mu_);
      if (!closed_) {
        commands_.push_back(std::move(fn));
        l.unlock();
        Wake();
        return;
      }
    }
    fn();
  }

  void OpenAsync(const std::string& service, std::vector<std::string> args, int local_fd,
                 std::function<void(Status)> done) {
    Post([this, service, args = std::move(args), local_fd, done = std::move(done)]() mutable {
      DoOpen(service, std::move(args), local_fd, std::move(done));
    });
  }

  void SendReady(const std::string& info) {
    std::string text = SanitizeText(info);
    Post([this, text] {
      ready_info_ = text;
      if (hello_received_) Queue(FrameType::kReady, 0, text);
    });
  }

  void Stop() {
    {
      std::lock_guard<std::mutex> l(mu_);
      stop_requested_ = true;
    }
    Wake();
    if (thread_.joinable() && std::this_thread::get_id() != thread_.get_id()) thread_.join();
    std::lock_guard<std::mutex> l(mu_);
    if (!started_ && !closed_) {
      // Never started: tear down here.
      closed_ = true;
      close_error_ = Error(ErrorCode::kCancelled, "channel stopped");
      if (chan_fd_ >= 0) close(chan_fd_);
      chan_fd_ = -1;
      cv_.notify_all();
    }
  }

  Error Wait() {
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait(l, [this] { return closed_; });
    return close_error_;
  }

  bool WaitFor(std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> l(mu_);
    return cv_.wait_for(l, timeout, [this] { return closed_; });
  }

  MuxStats Stats() {
    std::lock_guard<std::mutex> l(mu_);
    return stats_;
  }

 private:
  void Wake() {
    if (wake_fd_ < 0) return;
    uint64_t one = 1;
    ssize_t r = write(wake_fd_, &one, sizeof one);
    (void)r;
  }

  void Log(const std::string& line) {
    if (opt_.log) opt_.log(line);
  }

  void Queue(FrameType type, uint32_t stream, std::string_view payload) {
    EncodeFrame(type, stream, payload, outbuf_);
  }

  uint32_t FirstId() const { return opt_.role == MuxRole::kHost ? 1 : 2; }

  void SendHello() {
    Queue(FrameType::kHello, 0, EncodeHello(session_));
    last_hello_ = std::chrono::steady_clock::now();
  }

  // The session is up: run deferred opens, repeat READY.
  void Establish() {
    hello_received_ = true;
    if (discarded_ > 0) Log("skipped " + std::to_string(discarded_) + " stale bytes before HELLO");
    discarded_ = 0;
    if (opt_.role == MuxRole::kGuest && !ready_info_.empty()) {
      Queue(FrameType::kReady, 0, ready_info_);
    }
    auto pending = std::move(pending_opens_);
    pending_opens_.clear();
    for (auto& p : pending) DoOpen(p.service, std::move(p.args), p.fd, std::move(p.done));
  }

  // Guest: forget every stream of the previous session (their local sockets see EOF).
  void ResetStreams(const std::string& why) {
    std::vector<std::function<void(Status)>> pending;
    for (auto& [id, s] : streams_) {
      if (s.end) s.end->Set(StreamEnd::Reason::kChannelClosed);
      if (s.fd >= 0) close(s.fd);
      if (s.open_done) pending.push_back(std::move(s.open_done));
    }
    streams_.clear();
    next_id_ = FirstId();
    last_peer_id_ = 0;
    for (auto& d : pending) d(Error(ErrorCode::kUnavailable, why));
  }

  void StartGuestSession(uint64_t session) {
    if (hello_received_ || !streams_.empty()) {
      Log("host reconnected (new session): resetting streams");
      ResetStreams("host reconnected");
    }
    session_ = session;
    SendHello();
    Establish();
  }

  // Looks for the peer's HELLO in scan_buf_, skipping stale bytes; then feeds the rest on.
  void TrySync() {
    while (!hello_received_ && !failure_) {
      size_t keep = 0;
      auto at = FindHelloFrame(scan_buf_, &keep);
      if (!at) {
        discarded_ += scan_buf_.size() - keep;
        scan_buf_.erase(0, scan_buf_.size() - keep);
        if (discarded_ > kMaxPreHelloBytes) {
          if (opt_.role == MuxRole::kHost) {
            Violation("no HELLO within " + std::to_string(kMaxPreHelloBytes) + " bytes");
          } else {
            discarded_ = 0;
          }
        }
        return;
      }
      discarded_ += *at;
      auto session = ParseHello(std::string_view(scan_buf_).substr(*at + kHeaderSize,
                                                                   kHelloPayloadSize));
      std::string rest = scan_buf_.substr(*at + kHelloFrameSize);
      scan_buf_.clear();
      if (!session.ok()) return Fail(session.error());  // magic matched: a version mismatch
      if (opt_.role == MuxRole::kHost) {
        if (*session != session_) {  // an answer to an earlier connection's HELLO
          discarded_ += kHelloFrameSize;
          scan_buf_ = std::move(rest);
          continue;
        }
        Establish();
      } else {
        StartGuestSession(*session);
      }
      decoder_ = FrameDecoder();
      decoder_.Feed(rest);
    }
  }

  bool OursId(uint32_t id) const { return (id % 2 == 1) == (opt_.role == MuxRole::kHost); }

  // `queued`: the open comes from the front of waiting_opens_ (it goes before those behind it).
  void DoOpen(const std::string& service, std::vector<std::string> args, int local_fd,
              std::function<void(Status)> done, bool queued = false) {
    auto fail = [&](Error e) {
      close(local_fd);
      if (done) done(e);
    };
    if (failure_) return fail(*failure_);
    if (!hello_received_) {
      if (pending_opens_.size() >= opt_.max_streams + opt_.max_waiting_opens) {
        return fail(Error(ErrorCode::kBusy, "too many channel streams waiting for the peer"));
      }
      pending_opens_.push_back({service, std::move(args), local_fd, std::move(done)});
      return;
    }
    if (streams_.size() >= opt_.max_streams || (!queued && !waiting_opens_.empty())) {
      // At the cap: wait for a stream to end (StartWaitingOpens), in order.
      if (waiting_opens_.size() >= opt_.max_waiting_opens) {
        return fail(Error(ErrorCode::kBusy, "too many channel streams waiting to open"));
      }
      waiting_opens_.push_back({service, std::move(args), local_fd, std::move(done)});
      return;
    }
    auto payload = EncodeOpen(OpenRequest{service, std::move(args)});
    if (!payload.ok()) return fail(payload.error());
    if (auto st = SetNonBlocking(local_fd); !st.ok()) return fail(st.error());
    uint32_t id = next_id_;
    next_id_ += 2;
    Stream& s = streams_[id];
    s.fd = local_fd;
    s.opening = true;
    s.open_done = std::move(done);
    Queue(FrameType::kOpen, id, *payload);
  }

  // Opens that waited for a free stream, as streams end.
  void StartWaitingOpens() {
    while (!waiting_opens_.empty() && hello_received_ && !failure_ &&
           streams_.size() < opt_.max_streams) {
      PendingOpen p = std::move(waiting_opens_.front());
      waiting_opens_.pop_front();
      DoOpen(p.service, std::move(p.args), p.fd, std::move(p.done), /*queued=*/true);
    }
  }

  // Closes the channel with `why`; further frames are not processed.
  void Fail(Error why) {
    if (failure_) return;
    Log("channel closed: " + why.message());
    failure_ = why;
  }

  void Violation(const std::string& what) {
    if (opt_.role == MuxRole::kGuest) {
      // The host is trusted by the guest: a broken byte stream means a stale or restarted host.
      // Resynchronise on its next HELLO instead of ending.
      Log("channel desynchronised (" + what + "): waiting for the host's HELLO");
      ResetStreams("channel desynchronised");
      hello_received_ = false;
      scan_buf_ = decoder_.TakeBuffered();
      decoder_ = FrameDecoder();
      resync_ = true;
      return;
    }
    Fail(Error(ErrorCode::kCorrupt, "protocol violation by peer: " + what));
  }

  void SendClose(uint32_t id, Stream& s) {
    if (s.close_sent) return;
    s.close_sent = true;
    Queue(FrameType::kClose, id, "");
    if (s.fd >= 0) close(s.fd);
    s.fd = -1;
    s.inbuf.clear();
    s.in_off = 0;
  }

  void HandleFrame(Frame& f) {
    switch (f.type) {
      case FrameType::kHello: {
        if (opt_.role == MuxRole::kHost) return Violation("second HELLO");
        auto session = ParseHello(f.payload);
        if (!session.ok()) return Fail(session.error());
        if (*session != session_) StartGuestSession(*session);
        return;  // else a repeated HELLO of this session
      }
      case FrameType::kReady: {
        if (opt_.role != MuxRole::kHost) return Violation("READY sent to the guest");
        std::string info = SanitizeText(f.payload);
        ready_ = true;
        if (opt_.on_ready) opt_.on_ready(info);
        return;
      }
      case FrameType::kGoAway:
        if (opt_.role == MuxRole::kGuest) {
          // The host is going away (stop, suspend): wait for the next connection's HELLO.
          Log("host said GOAWAY: " + SanitizeText(f.payload));
          ResetStreams("host closed the channel");
          hello_received_ = false;
          scan_buf_ = decoder_.TakeBuffered();
          decoder_ = FrameDecoder();
          resync_ = true;
          return;
        }
        return Fail(Error(ErrorCode::kUnavailable,
                          "peer closed the channel: " + SanitizeText(f.payload)));
      case FrameType::kOpen:
        return HandleOpen(f);
      default:
        break;
    }
    auto it = streams_.find(f.stream);
    if (it == streams_.end()) {
      return Violation(std::string(FrameTypeName(f.type)) + " for unknown stream " +
                       std::to_string(f.stream));
    }
    Stream& s = it->second;
    if (s.close_received) {
      return Violation(std::string(FrameTypeName(f.type)) + " after CLOSE on stream " +
                       std::to_string(f.stream));
    }
    if (f.type == FrameType::kOpenOk || f.type == FrameType::kOpenFail) {
      if (!s.opening) return Violation("unexpected OPEN reply on stream " + std::to_string(f.stream));
      s.opening = false;
      auto done = std::move(s.open_done);
      if (f.type == FrameType::kOpenOk) {
        if (done) done(OkStatus());
      } else {
        close(s.fd);
        streams_.erase(it);
        if (done) done(Error(ErrorCode::kUnavailable, "peer refused stream: " +
                                                          SanitizeText(f.payload)));
      }
      return;
    }
    if (s.opening) {
      return Violation(std::string(FrameTypeName(f.type)) + " before OPEN_OK on stream " +
                       std::to_string(f.stream));
    }
    switch (f.type) {
      case FrameType::kData:
        if (s.remote_eof) return Violation("DATA after EOF on stream " + std::to_string(f.stream));
        if (f.payload.size() > s.recv_allowed) {
          return Violation("DATA beyond the flow-control window on stream " +
                           std::to_string(f.stream));
        }
        s.recv_allowed -= static_cast<uint32_t>(f.payload.size());
        if (s.close_sent) return;  // we already forgot the local side; drop
        if (s.in_off == s.inbuf.size()) {
          s.inbuf.clear();
          s.in_off = 0;
        }
        s.inbuf += f.payload;
        return;
      case FrameType::kWindow: {
        auto inc = ParseWindow(f.payload);
        if (!inc.ok()) return Violation(inc.error().message());
        if (uint64_t{s.send_credit} + *inc > kMaxWindow) {
          return Violation("WINDOW overflow on stream " + std::to_string(f.stream));
        }
        s.send_credit += *inc;
        return;
      }
      case FrameType::kEof:
        if (s.remote_eof) return Violation("second EOF on stream " + std::to_string(f.stream));
        s.remote_eof = true;
        return;
      case FrameType::kClose:
        // CLOSE before EOF: the peer's side failed (a reset), not an orderly end.
        if (!s.remote_eof && s.end) s.end->Set(StreamEnd::Reason::kReset);
        s.close_received = true;
        if (s.close_sent) streams_.erase(it);
        // Else: Sweep() flushes what is buffered, then answers CLOSE and forgets it.
        return;
      default:
        return Violation("unexpected frame type");
    }
  }

  void HandleOpen(Frame& f) {
    if (OursId(f.stream)) return Violation("OPEN with our own stream-id parity");
    if (f.stream <= last_peer_id_) return Violation("OPEN with a reused or decreasing stream id");
    last_peer_id_ = f.stream;
    auto req = ParseOpen(f.payload);
    if (!req.ok()) return Violation(req.error().message());
    if (streams_.size() >= opt_.max_streams) {
      Log("refused OPEN of '" + req->service + "': too many streams");
      Queue(FrameType::kOpenFail, f.stream, "too many open streams");
      return;
    }
    StreamServiceHandler handler;
    {
      std::lock_guard<std::mutex> l(mu_);
      auto it = services_.find(req->service);
      if (it != services_.end()) handler = it->second;
    }
    if (!handler) {
      Log("refused OPEN of unregistered service '" + req->service + "'");
      Queue(FrameType::kOpenFail, f.stream, "no such service: " + req->service);
      return;
    }
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0 || !SetNonBlocking(sv[0]).ok()) {
      Queue(FrameType::kOpenFail, f.stream, "host out of resources");
      return;
    }
    Stream& s = streams_[f.stream];
    s.fd = sv[0];
    s.end = std::make_shared<StreamEnd>();
    Queue(FrameType::kOpenOk, f.stream, "");
    handler(sv[1], req->args, s.end);
  }

  void ReadChannel() {
    char buf[kReadChunk];
    ssize_t n = read(chan_fd_, buf, sizeof buf);
    if (n == 0) return Fail(Error(ErrorCode::kUnavailable, "peer disconnected"));
    if (n < 0) {
      if (errno == EAGAIN || errno == EINTR) return;
      if (errno == ECONNRESET) return Fail(Error(ErrorCode::kUnavailable, "peer disconnected"));
      return Fail(ErrnoError("channel read", errno));
    }
    std::string_view data(buf, static_cast<size_t>(n));
    if (hello_received_) {
      decoder_.Feed(data);
    } else {
      scan_buf_ += data;
    }
    while (!failure_) {
      if (!hello_received_) {
        TrySync();
        if (!hello_received_) return;
      }
      auto next = decoder_.Next();
      if (!next.ok()) {
        Violation(next.error().message());
        resync_ = false;
        continue;  // the guest resynchronises; the host has failed and the loop ends
      }
      if (!next->has_value()) break;
      HandleFrame(**next);
      if (resync_) {
        resync_ = false;
        continue;
      }
    }
  }

  void WriteChannel() {
    while (out_off_ < outbuf_.size()) {
      ssize_t n = WriteSome(chan_fd_, outbuf_.data() + out_off_, outbuf_.size() - out_off_);
      if (n < 0) {
        if (errno == EAGAIN || errno == EINTR) break;
        if (errno == EPIPE || errno == ECONNRESET) {
          return Fail(Error(ErrorCode::kUnavailable, "peer disconnected"));
        }
        return Fail(ErrnoError("channel write", errno));
      }
      out_off_ += static_cast<size_t>(n);
    }
    if (out_off_ == outbuf_.size()) {
      outbuf_.clear();
      out_off_ = 0;
    } else if (out_off_ > kOutboundSoftCap) {
      outbuf_.erase(0, out_off_);
      out_off_ = 0;
    }
  }

  size_t OutPending() const { return outbuf_.size() - out_off_; }

  void ReadLocal(uint32_t id, Stream& s) {
    size_t want = std::min<size_t>(s.send_credit, kMaxPayload);
    char buf[kMaxPayload];
    ssize_t n = recv(s.fd, buf, want, 0);
    if (n < 0 && errno == ENOTSOCK) n = read(s.fd, buf, want);
    if (n < 0) {
      if (errno == EAGAIN || errno == EINTR) return;
      return SendClose(id, s);  // ECONNRESET and friends: the local side is gone
    }
    if (n == 0) {
      s.local_eof = true;
      Queue(FrameType::kEof, id, "");
      return;
    }
    s.send_credit -= static_cast<uint32_t>(n);
    Queue(FrameType::kData, id, std::string_view(buf, static_cast<size_t>(n)));
  }

  void WriteLocal(uint32_t id, Stream& s) {
    while (s.pending_in() > 0) {
      ssize_t n = WriteSome(s.fd, s.inbuf.data() + s.in_off, s.pending_in());
      if (n < 0) {
        if (errno == EAGAIN || errno == EINTR) break;
        return SendClose(id, s);  // EPIPE: nobody will read this stream any more
      }
      s.in_off += static_cast<size_t>(n);
      s.consumed_unacked += static_cast<uint32_t>(n);
    }
    if (s.pending_in() == 0) {
      s.inbuf.clear();
      s.in_off = 0;
    }
    if (!s.remote_eof && !s.close_received && s.consumed_unacked > 0 &&
        (s.consumed_unacked >= kInitialWindow / 4 || s.pending_in() == 0)) {
      Queue(FrameType::kWindow, id, EncodeWindow(s.consumed_unacked));
      s.recv_allowed += s.consumed_unacked;
      s.consumed_unacked = 0;
    }
  }

  // Advances stream state machines after I/O: half-closes, CLOSE exchange, forgetting streams.
  void Sweep() {
    for (auto it = streams_.begin(); it != streams_.end();) {
      uint32_t id = it->first;
      Stream& s = it->second;
      if (!s.close_sent && !s.opening && s.pending_in() == 0) {
        if (s.remote_eof && !s.wr_shut) {
          if (shutdown(s.fd, SHUT_WR) != 0 && errno != ENOTSOCK && errno != ENOTCONN) {
            SendClose(id, s);
          }
          s.wr_shut = true;
        }
        if (s.close_received || (s.local_eof && s.remote_eof)) SendClose(id, s);
      }
      if (s.close_sent && s.close_received) {
        it = streams_.erase(it);
      } else {
        ++it;
      }
    }
  }

  void RunCommands() {
    uint64_t v;
    while (read(wake_fd_, &v, sizeof v) > 0) {
    }
    std::vector<std::function<void()>> cmds;
    {
      std::lock_guard<std::mutex> l(mu_);
      cmds.swap(commands_);
      if (stop_requested_ && !failure_) failure_ = Error(ErrorCode::kCancelled, "channel stopped");
    }
    for (auto& c : cmds) c();
  }

  void UpdateStats() {
    MuxStats st;
    st.open_streams = streams_.size();
    st.waiting_opens = waiting_opens_.size();
    for (auto& [id, s] : streams_) st.inbound_buffered += s.pending_in();
    st.outbound_buffered = OutPending();
    st.ready_received = ready_;
    st.session_established = hello_received_;
    std::lock_guard<std::mutex> l(mu_);
    stats_ = st;
  }

  void Loop() {
    std::vector<pollfd> pfds;
    std::vector<uint32_t> ids;
    while (true) {
      RunCommands();
      if (failure_) break;
      Sweep();
      StartWaitingOpens();
      UpdateStats();
      pfds.clear();
      ids.clear();
      pfds.push_back({wake_fd_, POLLIN, 0});
      short chan_events = 0;
      if (OutPending() < kOutboundHardCap) chan_events |= POLLIN;
      if (OutPending() > 0) chan_events |= POLLOUT;
      pfds.push_back({chan_fd_, chan_events, 0});
      for (auto& [id, s] : streams_) {
        if (s.fd < 0 || s.close_sent) continue;
        short ev = 0;
        if (!s.opening && !s.local_eof && !s.close_received && s.send_credit > 0 &&
            OutPending() < kOutboundSoftCap) {
          ev |= POLLIN;
        }
        if (s.pending_in() > 0) ev |= POLLOUT;
        if (ev == 0) continue;  // a bare fd would report POLLHUP forever
        pfds.push_back({s.fd, ev, 0});
        ids.push_back(id);
      }
      int timeout_ms = -1;
      if (opt_.role == MuxRole::kHost && !hello_received_) {
        auto since = std::chrono::steady_clock::now() - last_hello_;
        if (since >= hello_resend_) {
          if (OutPending() < 4096) SendHello();  // the guest may have missed it (stale bytes)
          hello_resend_ = std::min<std::chrono::steady_clock::duration>(hello_resend_ * 2, kHelloResend);
          continue;
        }
        timeout_ms = static_cast<int>(
            std::chrono::duration_cast<std::chrono::milliseconds>(hello_resend_ - since).count()) + 1;
      }
      int r = poll(pfds.data(), pfds.size(), timeout_ms);
      if (r < 0) {
        if (errno == EINTR) continue;
        Fail(ErrnoError("poll", errno));
        break;
      }
      if (pfds[1].revents & POLLOUT) WriteChannel();
      if (!failure_ && (pfds[1].revents & (POLLIN | POLLHUP | POLLERR))) {
        if ((pfds[1].revents & POLLIN) || !(chan_events & POLLOUT)) {
          ReadChannel();
        } else {
          WriteChannel();  // surfaces the error
        }
      }
      for (size_t i = 2; i < pfds.size() && !failure_; ++i) {
        if (pfds[i].revents == 0) continue;
        auto it = streams_.find(ids[i - 2]);
        if (it == streams_.end()) continue;
        Stream& s = it->second;
        if (s.fd < 0 || s.close_sent) continue;
        if ((pfds[i].events & POLLOUT) && (pfds[i].revents & (POLLOUT | POLLERR | POLLHUP))) {
          WriteLocal(it->first, s);
        }
        // Re-check the soft cap per stream so one poll round cannot overfill the queue (both
        // sides stop reading the channel only past the hard cap, which data never reaches).
        if (s.fd >= 0 && !s.close_sent && (pfds[i].events & POLLIN) &&
            OutPending() < kOutboundSoftCap &&
            (pfds[i].revents & (POLLIN | POLLERR | POLLHUP))) {
          ReadLocal(it->first, s);
        }
      }
      if (!failure_ && OutPending() > 0) WriteChannel();
    }
    Teardown();
  }

  void Teardown() {
    Error why = failure_ ? *failure_ : Error(ErrorCode::kInternal, "channel loop ended");
    if (chan_fd_ >= 0) {
      // Best effort: tell the peer why, without blocking.
      std::string bye;
      EncodeFrame(FrameType::kGoAway, 0, SanitizeText(why.message()), bye);
      outbuf_ += bye;
      WriteChannel();
      close(chan_fd_);
      chan_fd_ = -1;
    }
    std::vector<std::function<void(Status)>> pending;
    for (auto& [id, s] : streams_) {
      if (s.end) s.end->Set(StreamEnd::Reason::kChannelClosed);
      if (s.fd >= 0) close(s.fd);
      if (s.open_done) pending.push_back(std::move(s.open_done));
    }
    streams_.clear();
    for (auto* queue : {&pending_opens_, &waiting_opens_}) {
      for (auto& p : *queue) {
        close(p.fd);
        if (p.done) pending.push_back(std::move(p.done));
      }
      queue->clear();
    }
    for (auto& d : pending) d(why);
    std::vector<std::function<void()>> cmds;
    {
      std::lock_guard<std::mutex> l(mu_);
      closed_ = true;
      close_error_ = why;
      stats_ = MuxStats{};
      stats_.ready_received = ready_;
      stats_.closed = true;
      cmds.swap(commands_);
    }
    // Commands queued after the failure (opens) run against the failed state and fail.
    for (auto& c : cmds) c();
    if (opt_.on_closed) opt_.on_closed(why);
    cv_.notify_all();
  }

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

Mux::Mux(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Mux::~Mux() { impl_->Stop(); }

Result<std::unique_ptr<Mux>> Mux::Create(int channel_fd, MuxOptions options) {
  auto impl = std::make_unique<Impl>(channel_fd, std::move(options));
  RETURN_IF_ERROR(impl->Init());
  return std::unique_ptr<Mux>(new Mux(std::move(impl)));
}

void Mux::RegisterService(const std::string& name, ServiceHandler handler) {
  impl_->RegisterService(name, [handler = std::move(handler)](
                                   int fd, const std::vector<std::string>& args,
                                   std::shared_ptr<const StreamEnd>) { handler(fd, args); });
}
void Mux::RegisterStreamService(const std::string& name, StreamServiceHandler handler) {
  impl_->RegisterService(name, std::move(handler));
}
Status Mux::Start() { return impl_->Start(); }
void Mux::OpenAsync(const std::string& service, std::vector<std::string> args, int local_fd,
                    std::function<void(Status)> done) {
  impl_->OpenAsync(service, std::move(args), local_fd, std::move(done));
}

Result<int> Mux::Open(const std::string& service, std::vector<std::string> args,
                      std::chrono::milliseconds timeout) {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
    return ErrnoError("socketpair", errno);
  }
  auto promise = std::make_shared<std::promise<Status>>();
  auto future = promise->get_future();
  impl_->OpenAsync(service, std::move(args), sv[0],
                   [promise](Status st) { promise->set_value(std::move(st)); });
  if (future.wait_for(timeout) != std::future_status::ready) {
    close(sv[1]);
    return Error(ErrorCode::kUnavailable, "timed out opening channel stream '" + service + "'",
                 "is the guest agent running? see the workspace's serial log");
  }
  Status st = future.get();
  if (!st.ok()) {
    close(sv[1]);
    return st.error();
  }
  return sv[1];
}

void Mux::SendReady(const std::string& info) { impl_->SendReady(info); }
void Mux::Stop() { impl_->Stop(); }
Error Mux::Wait() { return impl_->Wait(); }
bool Mux::WaitFor(std::chrono::milliseconds timeout) { return impl_->WaitFor(timeout); }
MuxStats Mux::Stats() const { return impl_->Stats(); }

}  // namespace cloister::channel
