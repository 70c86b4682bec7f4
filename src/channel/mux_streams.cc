#include "channel/mux_impl.h"

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

namespace cloister::channel {

ssize_t Mux::Impl::WriteSome(int fd, const char* data, size_t len) {
  ssize_t n = send(fd, data, len, MSG_NOSIGNAL);
  if (n < 0 && errno == ENOTSOCK) n = write(fd, data, len);
  return n;
}

void Mux::Impl::SendClose(uint32_t id, Stream& s) {
  if (s.close_sent) return;
  s.close_sent = true;
  Queue(FrameType::kClose, id, "");
  if (s.fd >= 0) close(s.fd);
  s.fd = -1;
  s.inbuf.clear();
  s.in_off = 0;
}

void Mux::Impl::HandleFrame(Frame& f) {
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

void Mux::Impl::HandleOpen(Frame& f) {
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

void Mux::Impl::ReadChannel() {
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

void Mux::Impl::WriteChannel() {
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

void Mux::Impl::ReadLocal(uint32_t id, Stream& s) {
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

void Mux::Impl::WriteLocal(uint32_t id, Stream& s) {
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
void Mux::Impl::Sweep() {
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

}  // namespace cloister::channel
