// The proxy's I/O vocabulary, shared by the files that do its async I/O (proxy.cc, session.cc,
// tls_intercept.cc, http_driver.cc, upstream.cc): Asio and Beast names, the socket and TLS stream
// types of both legs, and the upstream connection a client connection reuses.
// Threading: see proxy.h (one single-threaded event loop per thread; a connection stays on one).
#pragma once

#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "proxy/tls_stream.h"

namespace cloister::proxy {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace ssl = asio::ssl;
using asio::awaitable;
using boost::system::error_code;
using GenericSocket = asio::generic::stream_protocol::socket;
using TcpSocket = asio::ip::tcp::socket;
// Both TLS legs: batched reads and writes (tls_stream.h), not asio::ssl::stream.
using TlsStream = BatchedTlsStream<TcpSocket>;
using ClientTls = BatchedTlsStream<GenericSocket>;
inline constexpr auto kTok = asio::as_tuple(asio::use_awaitable);
inline constexpr size_t kIoBuffer = 64 * 1024;

inline int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Milliseconds since `t` on the steady clock.
inline double MsSince(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
}

// A bound on a wait: unless Disarm()ed (or destroyed) first, `on_expiry` runs on the executor's
// loop once `ms` have passed, and expired() says so afterwards. on_expiry cancels what the wait is
// for (a socket's pending operations end with operation_aborted), so the waiting step sees an
// error and asks expired() why. ms <= 0: no bound.
class Deadline {
 public:
  template <class Executor>
  Deadline(const Executor& ex, int ms, std::function<void()> on_expiry)
      : state_(std::make_shared<State>(ex)) {
    if (ms <= 0) return;
    state_->armed = true;
    state_->timer.expires_after(std::chrono::milliseconds(ms));
    state_->timer.async_wait([state = state_, fn = std::move(on_expiry)](error_code ec) {
      if (ec || !state->armed) return;  // disarmed, or destroyed with what fn touches
      state->armed = false;
      state->expired = true;
      fn();
    });
  }
  ~Deadline() { Disarm(); }
  Deadline(const Deadline&) = delete;
  Deadline& operator=(const Deadline&) = delete;

  void Disarm() {
    if (!state_->armed) return;
    state_->armed = false;
    state_->timer.cancel();
  }
  bool expired() const { return state_->expired; }

 private:
  struct State {
    explicit State(const asio::any_io_executor& ex) : timer(ex) {}
    asio::steady_timer timer;
    bool armed = false;
    bool expired = false;
  };
  std::shared_ptr<State> state_;
};

// A bound on each read of a stream of reads (a response body): a read Begin()s and End()s; one
// pending longer than `ms` runs `on_expiry` once (which cancels it), and expired() says so. One
// timer for the whole stream, re-armed only when it fires: a read costs two clock reads. Time
// between reads (the client being written to) does not count. ms <= 0: no bound.
class IdleWatch {
 public:
  template <class Executor>
  IdleWatch(const Executor& ex, int ms, std::function<void()> on_expiry)
      : state_(std::make_shared<State>(ex)) {
    if (ms <= 0) return;
    state_->armed = true;
    state_->ms = std::chrono::milliseconds(ms);
    state_->fn = std::move(on_expiry);
    Arm(state_, std::chrono::steady_clock::now() + state_->ms);
  }
  ~IdleWatch() {
    state_->armed = false;
    state_->fn = nullptr;
    state_->timer.cancel();
  }
  IdleWatch(const IdleWatch&) = delete;
  IdleWatch& operator=(const IdleWatch&) = delete;

  void Begin() {
    state_->reading = true;
    state_->since = std::chrono::steady_clock::now();
  }
  void End() { state_->reading = false; }
  bool expired() const { return state_->expired; }

 private:
  struct State {
    explicit State(const asio::any_io_executor& ex) : timer(ex) {}
    asio::steady_timer timer;
    bool armed = false, expired = false, reading = false;
    std::chrono::milliseconds ms{0};
    std::chrono::steady_clock::time_point since;
    std::function<void()> fn;
  };
  static void Arm(const std::shared_ptr<State>& s, std::chrono::steady_clock::time_point at) {
    s->timer.expires_at(at);
    s->timer.async_wait([s](error_code ec) {
      if (ec || !s->armed) return;
      auto now = std::chrono::steady_clock::now();
      if (!s->reading) return Arm(s, now + s->ms);          // between reads: not silence
      if (now < s->since + s->ms) return Arm(s, s->since + s->ms);  // this read is younger
      s->armed = false;
      s->expired = true;
      if (s->fn) s->fn();
    });
  }
  std::shared_ptr<State> state_;
};

// One upstream connection, reused for keep-alive while the target stays the same.
template <class S>
struct UpstreamSlot {
  UpstreamSlot() { buf.reserve(kIoBuffer); }
  std::unique_ptr<S> stream;
  std::string key;  // "host:port"
  // Beast reads at most capacity - size bytes (but at least 512) per read: without the reserve a
  // small buffer made every read, and so every TLS record we sent on, about 512 bytes long.
  beast::flat_buffer buf;
  void Reset() {
    stream.reset();
    key.clear();
    buf.clear();
  }
};

}  // namespace cloister::proxy
