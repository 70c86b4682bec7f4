#include "channel/mux_impl.h"

#include <unistd.h>

#include <algorithm>

namespace cloister::channel {

void Mux::Impl::SendHello() {
  Queue(FrameType::kHello, 0, EncodeHello(session_));
  last_hello_ = std::chrono::steady_clock::now();
}

// The session is up: run deferred opens, repeat READY.
void Mux::Impl::Establish() {
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

std::vector<std::function<void(Status)>> Mux::Impl::DropStreams() {
  std::vector<std::function<void(Status)>> pending;
  for (auto& [id, s] : streams_) {
    if (s.end) s.end->Set(StreamEnd::Reason::kChannelClosed);
    if (s.fd >= 0) close(s.fd);
    if (s.open_done) pending.push_back(std::move(s.open_done));
  }
  streams_.clear();
  return pending;
}

// Guest: forget every stream of the previous session (their local sockets see EOF).
void Mux::Impl::ResetStreams(const std::string& why) {
  std::vector<std::function<void(Status)>> pending = DropStreams();
  next_id_ = FirstId();
  last_peer_id_ = 0;
  for (auto& d : pending) d(Error(ErrorCode::kUnavailable, why));
}

void Mux::Impl::StartGuestSession(uint64_t session) {
  if (hello_received_ || !streams_.empty()) {
    Log("host reconnected (new session): resetting streams");
    ResetStreams("host reconnected");
  }
  session_ = session;
  SendHello();
  Establish();
}

// Looks for the peer's HELLO in scan_buf_, skipping stale bytes; then feeds the rest on.
void Mux::Impl::TrySync() {
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

// `queued`: the open comes from the front of waiting_opens_ (it goes before those behind it).
void Mux::Impl::DoOpen(const std::string& service, std::vector<std::string> args, int local_fd,
            std::function<void(Status)> done, bool queued) {
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
void Mux::Impl::StartWaitingOpens() {
  while (!waiting_opens_.empty() && hello_received_ && !failure_ &&
         streams_.size() < opt_.max_streams) {
    PendingOpen p = std::move(waiting_opens_.front());
    waiting_opens_.pop_front();
    DoOpen(p.service, std::move(p.args), p.fd, std::move(p.done), /*queued=*/true);
  }
}

}  // namespace cloister::channel
