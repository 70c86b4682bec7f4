#include "proxy/http_driver.h"

#include <boost/asio/experimental/awaitable_operators.hpp>

#include "proxy/consent_filter.h"
#include "vault/crypto.h"

namespace cloister::proxy {
namespace {

// A piece buffer for bodies, uninitialised on purpose (a zeroed vector cost a 64 KiB memset per
// request) and freed with the request (an idle keep-alive connection holds none).
struct PieceBuffer {
  std::unique_ptr<char[]> p{new char[kIoBuffer]};
  char* data() const { return p.get(); }
  size_t size() const { return kIoBuffer; }
};

// Writes what the serializer has until it needs more body (or is done).
template <class Stream, class Serializer>
awaitable<bool> WriteSerialized(Stream& s, Serializer& sr) {
  for (;;) {
    auto [ec, n] = co_await http::async_write(s, sr, kTok);
    if (ec == http::error::need_buffer) co_return true;
    if (ec) co_return false;
    if (sr.is_done()) co_return true;
  }
}

// Ends every pending operation on the upstream leg (they complete with operation_aborted).
void CancelIo(TcpSocket& s) {
  error_code ec;
  s.cancel(ec);
}
void CancelIo(TlsStream& s) {
  error_code ec;
  s.next_layer().cancel(ec);
}

// The peer went away (rather than sent something malformed).
bool PeerGone(const error_code& ec) {
  return ec == http::error::partial_message || ec == http::error::end_of_stream ||
         ec == asio::error::eof || ec == asio::error::connection_reset ||
         ec == asio::error::broken_pipe || ec == ssl::error::stream_truncated ||
         ec == asio::error::operation_aborted;
}

// A request the proxy may send again on a new connection when a reused one failed before any
// byte of an answer (RFC 9110 9.2.2: idempotent methods).
bool Idempotent(http::verb v) {
  return v == http::verb::get || v == http::verb::head || v == http::verb::options ||
         v == http::verb::put || v == http::verb::delete_ || v == http::verb::trace;
}

}  // namespace

template <class Client, class Up>
struct HttpDriver::Turn {
  Turn(const ProxyConfig& config, const ProxyContext& ctx, const Origin& origin, Client& c,
       beast::flat_buffer& cb, RequestParser& p, UpstreamSlot<Up>& u)
      : config(config), client(c), cbuf(cb), parser(p), req(p.get()), up(u),
        ex(ctx, origin, p.get()) {}
  // Exactly one record per exchange: a turn that ends unrecorded was dropped with its event loop
  // (the proxy stopping).
  ~Turn() {
    vault::SecureWipe(pending);
    if (recorded) return;
    if (ex.rec.abort.empty()) {
      ex.rec.abort = kAbortProxyStopped;
      ex.rec.error = "the proxy stopped before the response was complete";
    }
    ex.rec.latency_ms = MsSince(ex.start);
    Record(config, ex.rec);
  }
  Turn(const Turn&) = delete;
  Turn& operator=(const Turn&) = delete;

  const ProxyConfig& config;
  Client& client;
  beast::flat_buffer& cbuf;
  RequestParser& parser;
  http::request<http::buffer_body>& req;
  UpstreamSlot<Up>& up;
  Exchange ex;
  PieceBuffer io;
  bool recorded = false;
  // Request: the body held before anything goes upstream, and whether it is all of it.
  std::string pending;
  bool complete = false;
  bool reused = false;  // the upstream connection served an earlier request
  std::chrono::steady_clock::time_point sent_at, head_at;
  // Response.
  std::optional<http::response_parser<http::buffer_body>> rp;
  bool upstream_keep = false;  // upstream may serve another request on this connection
  bool switching = false;      // 101 to an upgrade the client asked for
  bool keep = false;           // the client connection may serve another request
  bool client_ok = true;       // every write to the client succeeded
  bool up_ok = true;           // the upstream sent a whole response
  bool answered = false;       // a step answered the client itself (an error, a refusal)

  // Reads one piece of the request body into `io`; its size, or the read's error.
  awaitable<std::pair<error_code, size_t>> ReadPiece() {
    req.body().data = io.data();
    req.body().size = io.size();
    auto [ec, n] = co_await http::async_read_some(client, cbuf, parser, kTok);
    if (ec == http::error::need_buffer) ec = {};
    co_return std::pair<error_code, size_t>{ec, io.size() - req.body().size};
  }
  // Writes the record now (latency up to here); the turn's end writes none.
  void Finish() {
    ex.rec.latency_ms = MsSince(ex.start);
    Record(config, ex.rec);
    recorded = true;
  }
};

template <class Up, class Client>
awaitable<std::optional<Authority>> HttpDriver::Serve(Client& client, beast::flat_buffer& cbuf,
                                                      const Origin& origin) {
  // A plain proxy-mode connection may ask to CONNECT; a tunnel or a transparent stream may not.
  const bool may_connect = !origin.tls && !origin.transparent;
  UpstreamSlot<Up> up;
  for (;;) {
    RequestParser parser;
    parser.header_limit(kMaxHeaderBytes);
    parser.body_limit(boost::none);
    auto [ec, n] = co_await http::async_read_header(client, cbuf, parser, kTok);
    TraceRecord rec;
    rec.time_ms = NowMs();
    rec.host = origin.connect.host;
    rec.port = origin.connect.port;
    if (origin.transparent) rec.mode = "transparent";
    rec.source = origin.source;
    if (ec) {
      if (ec != http::error::end_of_stream && ec != asio::error::eof &&
          ec != ssl::error::stream_truncated && ec != asio::error::connection_reset &&
          ec != asio::error::operation_aborted) {
        co_await WriteError(client, 400, "malformed request: " + ec.message(), rec, config_);
      }
      co_return std::nullopt;
    }
    auto& req = parser.get();
    rec.method = std::string(req.method_string());
    rec.path = TracePath(std::string_view(req.target().data(), req.target().size()));
    if (Status st = ValidateRequestHead(req); !st.ok()) {
      co_await WriteError(client, 400, st.error().message(), rec, config_);
      co_return std::nullopt;
    }
    if (req.method() == http::verb::connect) {
      if (!may_connect) {
        co_await WriteError(client, 400, "CONNECT inside a tunnel", rec, config_);
        co_return std::nullopt;
      }
      auto target = ParseTarget("CONNECT", std::string_view(req.target().data(), req.target().size()));
      if (!target.ok() || !parser.is_done()) {
        co_await WriteError(client, 400, "CONNECT with a body", rec, config_);
        co_return std::nullopt;
      }
      co_return target->authority;
    }
    bool keep = co_await Forward(client, cbuf, parser, origin, up);
    if (!keep) co_return std::nullopt;
  }
}

template <class Client, class Up>
awaitable<void> HttpDriver::Answer(Turn<Client, Up>& t, int status, const std::string& reason,
                                   const std::string& abort) {
  if (!abort.empty()) t.ex.rec.abort = abort;
  t.ex.rec.latency_ms = MsSince(t.ex.start);
  t.recorded = true;
  t.answered = true;
  co_await WriteError(t.client, status, reason, t.ex.rec, config_);
}

template <class Client, class Up>
void HttpDriver::ClientWentAway(Turn<Client, Up>& t, const std::string& when) {
  t.ex.rec.abort = t.ex.origin.ClientAbort();
  t.ex.rec.error = "the client went away " + when;
  t.Finish();
}

template <class Client, class Up>
awaitable<bool> HttpDriver::Refused(Turn<Client, Up>& t, const Status& st) {
  Exchange& ex = t.ex;
  if (!ex.block.empty()) {
    ex.rec.blocked = true;
    for (const LeakFlag& l : ex.block) ex.rec.leaks.push_back(l);
    trip_(ex);
    co_await Answer(t, 451, "a credential placeholder was sent to a host it does not belong to; "
                            "the workspace is marked compromised");
    co_return false;
  }
  int status = ex.reply_status ? ex.reply_status : 500;
  co_await Answer(t, status, ex.reply_status ? ex.reply_reason : st.error().message());
  co_return false;
}

template <class Client, class Up>
awaitable<bool> HttpDriver::Forward(Client& client, beast::flat_buffer& cbuf, RequestParser& parser,
                                    const Origin& origin, UpstreamSlot<Up>& up) {
  Turn<Client, Up> t(config_, ctx_, origin, client, cbuf, parser, up);
  Exchange& ex = t.ex;
  ex.rec.time_ms = NowMs();
  ex.rec.method = std::string(t.req.method_string());
  if (origin.transparent) ex.rec.mode = "transparent";
  ex.rec.source = origin.source;
  ex.raw_target = std::string(t.req.target());
  ex.rec.path = TracePath(ex.raw_target);
  ex.hold_limit = config_.body_hold_bytes;
  ex.had_body = parser.chunked() || (parser.content_length() && *parser.content_length() > 0);

  if (!co_await DecideHead(t)) co_return false;
  if (!co_await ReadHeldBody(t)) co_return false;
  // A reused connection the upstream closed while it was idle fails before any byte of an
  // answer: once, and only when the request can be sent again as it was, a new connection.
  for (int attempt = 0;; ++attempt) {
    if (!co_await ConnectUpstream(t)) co_return false;
    Outcome sent = co_await SendRequest(t);
    if (sent == Outcome::kOk) sent = co_await ReceiveResponseHead(t);
    if (sent == Outcome::kOk) break;
    if (sent == Outcome::kEnded) co_return false;
    // kRetry: nothing came back on a reused connection.
    t.up.Reset();
    if (attempt > 0 || !t.complete || !Idempotent(t.req.method())) {
      co_await Answer(t, 502, "upstream closed the connection before answering",
                      kAbortUpstreamClosed);
      co_return false;
    }
  }
  vault::SecureWipe(t.pending);

  const bool head_only = t.req.method() == http::verb::head;
  if (ex.hold_response && !t.switching && !head_only) {
    if (!co_await RelayHeldResponse(t)) co_return false;
  } else if (t.rp->is_done()) {
    auto& res = t.rp->get();
    std::string empty;
    if (Status st = chain_.OnResponseBody(ex, res, empty, true); !st.ok()) {
      up.Reset();
      co_return co_await Refused(t, st);
    }
    http::serializer<false, http::buffer_body> rs{res};
    res.body().data = nullptr;
    res.body().size = 0;
    res.body().more = false;
    t.client_ok = co_await WriteSerialized(client, rs);
  } else {
    co_await RelayStreamedResponse(t);
  }
  ex.rec.phases.body_ms = MsSince(t.head_at);
  if (!t.client_ok && ex.rec.abort.empty()) {
    ex.rec.abort = origin.ClientAbort();
    ex.rec.error = "the client went away during the response";
  }
  t.Finish();
  if (!t.up_ok || !t.upstream_keep) {
    if (!t.switching) up.Reset();
  }
  if (!t.client_ok || !t.up_ok) co_return false;
  if (t.switching) {
    co_await PumpUpgraded(t);
    up.Reset();
    co_return false;
  }
  co_return t.keep;
}

// Head: routing, scope, detection, consent, substitution, normalisation, extension filters.
template <class Client, class Up>
awaitable<bool> HttpDriver::DecideHead(Turn<Client, Up>& t) {
  Exchange& ex = t.ex;
  for (;;) {
    if (Status st = chain_.OnRequestHead(ex); !st.ok()) co_return co_await Refused(t, st);
    if (!ex.consent_wait) co_return true;
    // A credential waits for a person's decision (consent_filter.h): wait on a timer the
    // decision cancels (AwaitDecision), so this loop keeps serving its other connections and an
    // open question costs no wakeups; the gate decides timeouts itself, and a hard cap here keeps
    // a broken gate from holding the request forever (refused: fail closed).
    auto cap = std::chrono::steady_clock::now() + std::chrono::minutes(10);
    while (!ex.consent_wait->Poll()) {
      if (std::chrono::steady_clock::now() >= cap) {
        ex.consent_wait.reset();
        co_return co_await Refused(t, ex.Refuse(403, "consent: no decision in 10 minutes"));
      }
      if (!co_await AwaitDecision(*ex.consent_wait, cap)) co_return false;  // the proxy is stopping
    }
  }
}

// Body: hold up to hold_limit bytes before anything goes upstream, so a refused request sends
// nothing; a longer body streams with a hold-back (StreamRequestBody).
template <class Client, class Up>
awaitable<bool> HttpDriver::ReadHeldBody(Turn<Client, Up>& t) {
  Exchange& ex = t.ex;
  if (ex.expect_continue && !t.parser.is_done()) {
    static const std::string k100 = "HTTP/1.1 100 Continue\r\n\r\n";
    auto [ec, n] = co_await asio::async_write(t.client, asio::buffer(k100), kTok);
    (void)ec;
    (void)n;
  }
  while (!t.parser.is_done() && t.pending.size() < ex.hold_limit) {
    auto [ec, got] = co_await t.ReadPiece();
    if (ec) {
      vault::SecureWipe(t.pending);
      if (PeerGone(ec)) {
        ClientWentAway(t, "during the request body");
      } else {
        co_await Answer(t, 400, "request body: " + ec.message());
      }
      co_return false;
    }
    t.pending.append(t.io.data(), got);
  }
  t.complete = t.parser.is_done();
  ex.body_whole = t.complete;
  size_t held_raw = t.pending.size();
  if (Status st = chain_.OnRequestBody(ex, t.pending, t.complete); !st.ok()) {
    vault::SecureWipe(t.pending);
    co_return co_await Refused(t, st);
  }
  if (t.complete && ex.had_body) {
    t.req.erase(http::field::transfer_encoding);
    t.req.set(http::field::content_length, std::to_string(t.pending.size()));
  }
  ex.rec.bytes_up = t.complete ? t.pending.size() : held_raw;
  co_return true;
}

// Connect (or reuse) upstream.
template <class Client, class Up>
awaitable<bool> HttpDriver::ConnectUpstream(Turn<Client, Up>& t) {
  std::string key = t.ex.target.HostPort();
  t.reused = t.up.stream && t.up.key == key;
  if (t.reused) co_return true;
  t.up.Reset();
  auto conn = co_await upstreams_.Open(t.ex.target, static_cast<Up*>(nullptr), &t.ex.rec);
  if (!conn.ok()) {
    vault::SecureWipe(t.pending);
    bool timeout = t.ex.rec.abort == kAbortUpstreamTimeout;
    co_await Answer(t, timeout ? 504 : 502, conn.error().message());
    co_return false;
  }
  t.up.stream = std::move(conn).value();
  t.up.key = key;
  co_return true;
}

// Send head + held body, then stream the rest with a hold-back.
template <class Client, class Up>
awaitable<HttpDriver::Outcome> HttpDriver::SendRequest(Turn<Client, Up>& t) {
  bool up_ok = true;
  if (t.complete) {
    http::serializer<true, http::buffer_body> sr{t.req};
    t.req.body().data = t.pending.empty() ? nullptr : t.pending.data();
    t.req.body().size = t.pending.size();
    t.req.body().more = false;
    up_ok = co_await WriteSerialized(*t.up.stream, sr);
  } else {
    up_ok = co_await StreamRequestBody(t);
    if (t.answered || t.recorded) co_return Outcome::kEnded;  // a bad piece, a refusal, gone
    vault::SecureWipe(t.pending);
  }
  t.sent_at = std::chrono::steady_clock::now();
  if (up_ok) co_return Outcome::kOk;
  if (t.reused) co_return Outcome::kRetry;
  t.up.Reset();
  vault::SecureWipe(t.pending);
  co_await Answer(t, 502, "upstream closed while sending the request", kAbortUpstreamClosed);
  co_return Outcome::kEnded;
}

// A body longer than the hold limit: the held bytes, then each piece as it arrives, always keeping
// back the last stream_hold_bytes until the next piece was scanned. Returns whether the upstream
// took all of it; t.answered or t.recorded when the exchange ended here.
template <class Client, class Up>
awaitable<bool> HttpDriver::StreamRequestBody(Turn<Client, Up>& t) {
  Exchange& ex = t.ex;
  Up& upstream = *t.up.stream;
  http::serializer<true, http::buffer_body> sr{t.req};
  // SECURITY: the detector finds a placeholder split across pieces only when its last byte
  // arrives; keeping this many bytes back means none of its bytes were written by then.
  const size_t hold = ctx_.stream_hold_bytes;
  std::string held = std::move(t.pending);
  std::string out;
  auto flush = [&](bool last) -> awaitable<bool> {
    size_t n = last ? held.size() : (held.size() > hold ? held.size() - hold : 0);
    out.assign(held, 0, n);
    held.erase(0, n);
    t.req.body().data = out.empty() ? nullptr : out.data();
    t.req.body().size = out.size();
    t.req.body().more = !last;
    if (out.empty() && !last) co_return true;
    co_return co_await WriteSerialized(upstream, sr);
  };
  bool up_ok = co_await flush(false);
  while (up_ok && !t.parser.is_done()) {
    auto [ec, got] = co_await t.ReadPiece();
    if (ec) {
      t.up.Reset();
      vault::SecureWipe(held);
      if (PeerGone(ec)) {
        ClientWentAway(t, "during the request body");
      } else {
        co_await Answer(t, 400, "request body: " + ec.message());
      }
      co_return false;
    }
    std::string piece(t.io.data(), got);
    if (Status st = chain_.OnRequestBody(ex, piece, t.parser.is_done()); !st.ok()) {
      t.up.Reset();  // SECURITY: the held bytes (with the placeholder) are never written
      vault::SecureWipe(held);
      vault::SecureWipe(piece);
      co_await Refused(t, st);
      co_return false;
    }
    ex.rec.bytes_up += got;
    held.append(piece);
    vault::SecureWipe(piece);
    up_ok = co_await flush(false);
  }
  if (up_ok) up_ok = co_await flush(true);
  vault::SecureWipe(out);
  vault::SecureWipe(held);
  co_return up_ok;
}

// Response: the head (1xx informational ones dropped) within upstream_idle_ms, then the chain's
// view of it.
template <class Client, class Up>
awaitable<HttpDriver::Outcome> HttpDriver::ReceiveResponseHead(Turn<Client, Up>& t) {
  Exchange& ex = t.ex;
  Up& upstream = *t.up.stream;
  bool any_byte = false;
  for (;;) {
    t.rp.emplace();
    t.rp->header_limit(kMaxHeaderBytes);
    t.rp->body_limit(boost::none);
    if (t.req.method() == http::verb::head) t.rp->skip(true);
    Deadline deadline(co_await asio::this_coro::executor, config_.upstream_idle_ms,
                      [&upstream] { CancelIo(upstream); });
    auto [ec, n] = co_await http::async_read_header(upstream, t.up.buf, *t.rp, kTok);
    deadline.Disarm();
    if (ec) {
      if (deadline.expired()) {
        t.up.Reset();
        co_await Answer(t, 504,
                        "upstream sent no response within " +
                            std::to_string(config_.upstream_idle_ms) + " ms",
                        kAbortUpstreamTimeout);
        co_return Outcome::kEnded;
      }
      if (t.reused && !any_byte &&
          (ec == http::error::end_of_stream || ec == asio::error::eof ||
           ec == asio::error::connection_reset || ec == ssl::error::stream_truncated)) {
        co_return Outcome::kRetry;
      }
      t.up.Reset();
      co_await Answer(t, 502, "upstream response: " + ec.message(), kAbortUpstreamClosed);
      co_return Outcome::kEnded;
    }
    any_byte = true;
    unsigned code = t.rp->get().result_int();
    if (code >= 100 && code < 200 && code != 101) continue;  // 1xx informational: dropped
    break;
  }
  t.head_at = std::chrono::steady_clock::now();
  ex.rec.phases.first_byte_ms =
      std::chrono::duration<double, std::milli>(t.head_at - t.sent_at).count();
  auto& res = t.rp->get();
  ex.rec.status = static_cast<int>(res.result_int());
  t.switching = res.result_int() == 101 && ex.upgrade;
  t.upstream_keep = res.keep_alive() && !t.rp->need_eof();
  if (Status st = chain_.OnResponseHead(ex, res); !st.ok()) {
    t.up.Reset();  // the response body is never read: the connection cannot be reused
    co_await Refused(t, st);
    co_return Outcome::kEnded;
  }
  t.keep = ex.client_keep_alive && t.upstream_keep && !t.switching;
  if (!t.switching) res.keep_alive(t.keep);
  res.version(11);
  co_return Outcome::kOk;
}

// A filter must see the whole body before the guest sees any of it (filter.h).
template <class Client, class Up>
awaitable<bool> HttpDriver::RelayHeldResponse(Turn<Client, Up>& t) {
  Exchange& ex = t.ex;
  auto& rp = *t.rp;
  auto& res = rp.get();
  Up& upstream = *t.up.stream;
  std::string body;
  IdleWatch idle(co_await asio::this_coro::executor, config_.upstream_idle_ms,
                 [&upstream] { CancelIo(upstream); });
  while (!rp.is_done()) {
    res.body().data = t.io.data();
    res.body().size = t.io.size();
    idle.Begin();
    auto [ec, n] = co_await http::async_read_some(upstream, t.up.buf, rp, kTok);
    idle.End();
    if (ec == http::error::need_buffer) ec = {};
    if (ec) {
      t.up.Reset();
      vault::SecureWipe(body);
      if (idle.expired()) {
        co_await Answer(t, 504,
                        "upstream sent nothing for " + std::to_string(config_.upstream_idle_ms) +
                            " ms of its response body",
                        kAbortUpstreamTimeout);
      } else {
        co_await Answer(t, 502, "upstream response: " + ec.message(), kAbortUpstreamClosed);
      }
      co_return false;
    }
    size_t got = t.io.size() - res.body().size;
    ex.rec.bytes_down += got;
    body.append(t.io.data(), got);
    if (body.size() > ex.response_hold_max) {
      t.up.Reset();
      vault::SecureWipe(body);
      co_await Answer(t, 502,
                      "upstream response body is longer than " +
                          std::to_string(ex.response_hold_max) +
                          " bytes, the most a filter that must see it whole holds");
      co_return false;
    }
  }
  if (Status st = chain_.OnResponseBody(ex, res, body, true); !st.ok()) {
    t.up.Reset();
    vault::SecureWipe(body);
    co_return co_await Refused(t, st);
  }
  res.erase(http::field::transfer_encoding);
  res.set(http::field::content_length, std::to_string(body.size()));
  http::serializer<false, http::buffer_body> whole{res};
  res.body().data = body.empty() ? nullptr : body.data();
  res.body().size = body.size();
  res.body().more = false;
  for (;;) {
    auto [ec, n] = co_await http::async_write(t.client, whole, kTok);
    if (ec) {
      t.client_ok = false;
      break;
    }
    if (whole.is_done()) break;
  }
  vault::SecureWipe(body);
  co_return true;
}

// Header, then body pieces as they arrive (SSE stays incremental), each within upstream_idle_ms.
template <class Client, class Up>
awaitable<void> HttpDriver::RelayStreamedResponse(Turn<Client, Up>& t) {
  Exchange& ex = t.ex;
  auto& rp = *t.rp;
  auto& res = rp.get();
  Up& upstream = *t.up.stream;
  http::serializer<false, http::buffer_body> rs{res};
  res.body().data = nullptr;
  res.body().size = 0;
  res.body().more = true;
  auto [hec, hn] = co_await http::async_write_header(t.client, rs, kTok);
  t.client_ok = !hec;
  std::string piece;
  IdleWatch idle(co_await asio::this_coro::executor, config_.upstream_idle_ms,
                 [&upstream] { CancelIo(upstream); });
  // Marks the response as cut by the upstream: silent past the bound, or closed.
  auto cut = [&](bool expired, const error_code& ec) {
    t.up_ok = false;  // the head is out: all that is left is to cut the response short
    if (expired) {
      ex.rec.abort = kAbortUpstreamTimeout;
      ex.rec.error = "upstream sent nothing for " + std::to_string(config_.upstream_idle_ms) +
                     " ms of its response body";
    } else {
      ex.rec.abort = kAbortUpstreamClosed;
      ex.rec.error = "upstream closed during the response body" +
                     (ec ? ": " + ec.message() : std::string());
    }
  };
  // A Content-Length body is read from the stream straight into `piece` (what the header read
  // left in up.buf first), never past its end: Beast's parser would read into up.buf and copy
  // every byte out again. Chunked (and read-to-close) bodies go through the parser.
  const bool by_length = !rp.chunked() && rp.content_length().has_value();
  if (by_length) {
    uint64_t left = *rp.content_length();
    while (t.client_ok && left > 0) {
      piece.resize(static_cast<size_t>(std::min<uint64_t>(left, kIoBuffer)));
      size_t got = 0;
      if (t.up.buf.size() > 0) {
        got = asio::buffer_copy(asio::buffer(piece), t.up.buf.data());
        t.up.buf.consume(got);
      } else {
        idle.Begin();
        auto [ec, n] = co_await upstream.async_read_some(asio::buffer(piece), kTok);
        idle.End();
        if (ec || n == 0) {
          cut(idle.expired(), ec);
          break;
        }
        got = n;
      }
      piece.resize(got);
      left -= got;
      ex.rec.bytes_down += got;
      if (Status st = chain_.OnResponseBody(ex, res, piece, left == 0); !st.ok()) {
        t.up_ok = false;
        ex.rec.error = "response cut: " + st.error().message();
        break;
      }
      res.body().data = piece.empty() ? nullptr : piece.data();
      res.body().size = piece.size();
      if (piece.empty() && left > 0) continue;
      res.body().more = left > 0;
      t.client_ok = co_await WriteSerialized(t.client, rs);
    }
  }
  while (!by_length && t.client_ok && !rp.is_done()) {
    // Chunked or read-to-close: the parser writes the body into `piece`, the string the filters
    // get; the resize zero-fills only what the last piece left unused.
    piece.resize(kIoBuffer);
    res.body().data = piece.data();
    res.body().size = piece.size();
    idle.Begin();
    auto [ec, n] = co_await http::async_read_some(upstream, t.up.buf, rp, kTok);
    idle.End();
    if (ec == http::error::need_buffer) ec = {};
    if (ec) {
      cut(idle.expired(), ec);
      break;
    }
    size_t got = piece.size() - res.body().size;
    piece.resize(got);
    ex.rec.bytes_down += got;
    if (got == 0 && !rp.is_done()) continue;
    if (Status st = chain_.OnResponseBody(ex, res, piece, rp.is_done()); !st.ok()) {
      t.up_ok = false;  // the head is out: all that is left is to cut the response short
      ex.rec.error = "response cut: " + st.error().message();
      break;
    }
    res.body().data = piece.empty() ? nullptr : piece.data();
    res.body().size = piece.size();
    if (piece.empty() && !rp.is_done()) continue;
    res.body().more = !rp.is_done();
    t.client_ok = co_await WriteSerialized(t.client, rs);
  }
  piece.resize(piece.capacity());  // all of it: an unredacted piece may have been longer
  vault::SecureWipe(piece);
}

// WebSocket (or another upgrade): raw bytes both ways until either side closes.
template <class Client, class Up>
awaitable<void> HttpDriver::PumpUpgraded(Turn<Client, Up>& t) {
  using namespace asio::experimental::awaitable_operators;
  Up& upstream = *t.up.stream;
  if (t.cbuf.size() > 0) {
    auto [ec, n] = co_await asio::async_write(upstream, t.cbuf.data(), kTok);
    if (ec) co_return;
    t.cbuf.consume(t.cbuf.size());
  }
  if (t.up.buf.size() > 0) {
    auto [ec, n] = co_await asio::async_write(t.client, t.up.buf.data(), kTok);
    if (ec) co_return;
    t.up.buf.consume(t.up.buf.size());
  }
  auto pump = [](auto& from, auto& to) -> awaitable<void> {
    std::vector<char> buf(kIoBuffer);
    for (;;) {
      auto [ec, n] = co_await from.async_read_some(asio::buffer(buf), kTok);
      if (ec) co_return;
      auto [wec, wn] = co_await asio::async_write(to, asio::buffer(buf.data(), n), kTok);
      if (wec) co_return;
    }
  };
  co_await (pump(t.client, upstream) || pump(upstream, t.client));
}

// The instantiations the sessions use (session.cc): a TLS-intercepted connection, and a plain
// one (proxy mode, or a transparent stream that speaks HTTP).
template awaitable<std::optional<Authority>> HttpDriver::Serve<TlsStream, ClientTls>(
    ClientTls&, beast::flat_buffer&, const Origin&);
template awaitable<std::optional<Authority>> HttpDriver::Serve<TcpSocket, GenericSocket>(
    GenericSocket&, beast::flat_buffer&, const Origin&);

}  // namespace cloister::proxy
