// The HTTP driver: reads each request of a client connection, runs it through the filter chain
// (chain.h) and relays it and its response. It owns every piece of async I/O (Beast parsers,
// upstream connections, the streaming hold-back, 100 Continue, upgrades); the filters decide.
#include <boost/asio/experimental/awaitable_operators.hpp>

#include "proxy/consent_filter.h"
#include "proxy/proxy_impl.h"
#include "vault/crypto.h"

namespace cloister::proxy {

template <class Up, class Client>
awaitable<void> Proxy::Impl::HttpLoop(Client& client, beast::flat_buffer& cbuf,
                                      const Origin& origin) {
  UpstreamSlot<Up> up;
  for (;;) {
    http::request_parser<http::buffer_body> parser;
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
        co_await WriteError(client, 400, "malformed request: " + ec.message(), rec);
      }
      co_return;
    }
    auto& req = parser.get();
    rec.method = std::string(req.method_string());
    rec.path = TracePath(std::string_view(req.target().data(), req.target().size()));
    if (Status st = ValidateRequestHead(req); !st.ok()) {
      co_await WriteError(client, 400, st.error().message(), rec);
      co_return;
    }
    if (req.method() == http::verb::connect) {
      co_await WriteError(client, 400, "CONNECT inside a tunnel", rec);
      co_return;
    }
    bool keep = co_await Forward(client, cbuf, parser, origin, up);
    if (!keep) co_return;
  }
}

template <class Client>
awaitable<bool> Proxy::Impl::Refused(Client& client, Exchange& ex, const Status& st) {
  if (!ex.block.empty()) {
    ex.rec.blocked = true;
    for (const LeakFlag& l : ex.block) ex.rec.leaks.push_back(l);
    Trip(ex);
    ex.rec.latency_ms = std::chrono::duration<double, std::milli>(
                            std::chrono::steady_clock::now() - ex.start).count();
    co_await WriteError(client, 451, "a credential placeholder was sent to a host it does not "
                                     "belong to; the workspace is marked compromised",
                        ex.rec);
    co_return false;
  }
  int status = ex.reply_status ? ex.reply_status : 500;
  co_await WriteError(client, status, ex.reply_status ? ex.reply_reason : st.error().message(),
                      ex.rec);
  co_return false;
}

template <class Client, class Up>
awaitable<bool> Proxy::Impl::Forward(Client& client, beast::flat_buffer& cbuf,
                                     http::request_parser<http::buffer_body>& parser,
                                     const Origin& origin, UpstreamSlot<Up>& up) {
  auto& req = parser.get();
  Exchange ex(ctx_, origin, req);
  ex.rec.time_ms = NowMs();
  ex.rec.method = std::string(req.method_string());
  if (origin.transparent) ex.rec.mode = "transparent";
  ex.rec.source = origin.source;
  ex.raw_target = std::string(req.target());
  ex.rec.path = TracePath(ex.raw_target);
  ex.hold_limit = config_.body_hold_bytes;
  ex.had_body = parser.chunked() || (parser.content_length() && *parser.content_length() > 0);

  // Head: routing, scope, detection, consent, substitution, normalisation, request filters.
  for (;;) {
    if (Status st = chain_.OnRequestHead(ex); !st.ok()) co_return co_await Refused(client, ex, st);
    if (!ex.consent_wait) break;
    // A credential waits for a person's decision (consent_filter.h): wait on a timer the
    // decision cancels (AwaitDecision), so this loop keeps serving its other connections and an
    // open question costs no wakeups; the gate decides timeouts itself, and a hard cap here keeps
    // a broken gate from holding the request forever (refused: fail closed).
    auto cap = std::chrono::steady_clock::now() + std::chrono::minutes(10);
    while (!ex.consent_wait->Poll()) {
      if (std::chrono::steady_clock::now() >= cap) {
        ex.consent_wait.reset();
        co_return co_await Refused(client, ex, ex.Refuse(403, "consent: no decision in 10 minutes"));
      }
      if (!co_await AwaitDecision(*ex.consent_wait, cap)) co_return false;  // the proxy is stopping
    }
  }
  if (ex.expect_continue && !parser.is_done()) {
    static const std::string k100 = "HTTP/1.1 100 Continue\r\n\r\n";
    auto [ec, n] = co_await asio::async_write(client, asio::buffer(k100), kTok);
    (void)ec;
    (void)n;
  }

  // Body: hold up to hold_limit bytes before anything goes upstream, so a refused request sends
  // nothing; a longer body streams with a hold-back (below).
  std::string pending;
  // The body buffer, uninitialised on purpose (a zeroed vector cost a 64 KiB memset per request)
  // and freed with the request (an idle keep-alive connection holds none).
  struct {
    std::unique_ptr<char[]> p{new char[kIoBuffer]};
    char* data() const { return p.get(); }
    size_t size() const { return kIoBuffer; }
  } io;
  auto read_piece = [&]() -> awaitable<Result<size_t>> {
    req.body().data = io.data();
    req.body().size = io.size();
    auto [ec, n] = co_await http::async_read_some(client, cbuf, parser, kTok);
    if (ec == http::error::need_buffer) ec = {};
    if (ec) co_return Error(ErrorCode::kInvalidArgument, "request body: " + ec.message());
    co_return io.size() - req.body().size;
  };
  while (!parser.is_done() && pending.size() < ex.hold_limit) {
    auto got = co_await read_piece();
    if (!got.ok()) {
      vault::SecureWipe(pending);
      co_await WriteError(client, 400, got.error().message(), ex.rec);
      co_return false;
    }
    pending.append(io.data(), *got);
  }
  bool complete = parser.is_done();
  ex.body_whole = complete;
  size_t held_raw = pending.size();
  if (Status st = chain_.OnRequestBody(ex, pending, complete); !st.ok()) {
    vault::SecureWipe(pending);
    co_return co_await Refused(client, ex, st);
  }
  if (complete && ex.had_body) {
    req.erase(http::field::transfer_encoding);
    req.set(http::field::content_length, std::to_string(pending.size()));
  }
  ex.rec.bytes_up = complete ? pending.size() : held_raw;

  // Connect (or reuse) upstream.
  std::string key = ex.target.HostPort();
  if (!up.stream || up.key != key) {
    up.Reset();
    auto conn = co_await OpenUpstream(ex.target, static_cast<Up*>(nullptr));
    if (!conn.ok()) {
      vault::SecureWipe(pending);
      co_await WriteError(client, 502, conn.error().message(), ex.rec);
      co_return false;
    }
    up.stream = std::move(conn).value();
    up.key = key;
  }
  Up& upstream = *up.stream;

  // Send head + held body, then stream the rest with a hold-back.
  http::serializer<true, http::buffer_body> sr{req};
  req.body().data = pending.empty() ? nullptr : pending.data();
  req.body().size = pending.size();
  req.body().more = !complete;
  auto write_all = [&]() -> awaitable<bool> {
    for (;;) {
      auto [ec, n] = co_await http::async_write(upstream, sr, kTok);
      if (ec == http::error::need_buffer) co_return true;
      if (ec) co_return false;
      if (sr.is_done()) co_return true;
    }
  };
  bool up_ok = true;
  if (complete) {
    up_ok = co_await write_all();
  } else {
    // SECURITY: the detector finds a placeholder split across pieces only when its last byte
    // arrives; keeping this many bytes back means none of its bytes were written by then.
    const size_t hold = ctx_.stream_hold_bytes;
    std::string held = std::move(pending);
    std::string out;
    auto flush = [&](bool last) -> awaitable<bool> {
      size_t n = last ? held.size() : (held.size() > hold ? held.size() - hold : 0);
      out.assign(held, 0, n);
      held.erase(0, n);
      req.body().data = out.empty() ? nullptr : out.data();
      req.body().size = out.size();
      req.body().more = !last;
      if (out.empty() && !last) co_return true;
      co_return co_await write_all();
    };
    up_ok = co_await flush(false);
    while (up_ok && !parser.is_done()) {
      auto got = co_await read_piece();
      if (!got.ok()) {
        up.Reset();
        vault::SecureWipe(held);
        co_await WriteError(client, 400, got.error().message(), ex.rec);
        co_return false;
      }
      std::string piece(io.data(), *got);
      if (Status st = chain_.OnRequestBody(ex, piece, parser.is_done()); !st.ok()) {
        up.Reset();  // SECURITY: the held bytes (with the placeholder) are never written
        vault::SecureWipe(held);
        vault::SecureWipe(piece);
        co_return co_await Refused(client, ex, st);
      }
      ex.rec.bytes_up += *got;
      held.append(piece);
      vault::SecureWipe(piece);
      up_ok = co_await flush(false);
    }
    if (up_ok) up_ok = co_await flush(true);
    vault::SecureWipe(out);
    vault::SecureWipe(held);
  }
  vault::SecureWipe(pending);
  if (!up_ok) {
    up.Reset();
    co_await WriteError(client, 502, "upstream closed while sending the request", ex.rec);
    co_return false;
  }

  // Response: header, then body pieces as they arrive (SSE stays incremental).
  std::optional<http::response_parser<http::buffer_body>> rp;
  for (;;) {
    rp.emplace();
    rp->header_limit(kMaxHeaderBytes);
    rp->body_limit(boost::none);
    if (req.method() == http::verb::head) rp->skip(true);
    auto [ec, n] = co_await http::async_read_header(upstream, up.buf, *rp, kTok);
    if (ec) {
      up.Reset();
      co_await WriteError(client, 502, "upstream response: " + ec.message(), ex.rec);
      co_return false;
    }
    unsigned code = rp->get().result_int();
    if (code >= 100 && code < 200 && code != 101) continue;  // 1xx informational: dropped
    break;
  }
  auto& res = rp->get();
  ex.rec.status = static_cast<int>(res.result_int());
  bool switching = res.result_int() == 101 && ex.upgrade;
  bool upstream_keep = res.keep_alive() && !rp->need_eof();
  if (Status st = chain_.OnResponseHead(ex, res); !st.ok()) {
    up.Reset();  // the response body is never read: the connection cannot be reused
    co_return co_await Refused(client, ex, st);
  }
  bool keep = ex.client_keep_alive && upstream_keep && !switching;
  if (!switching) res.keep_alive(keep);
  res.version(11);

  http::serializer<false, http::buffer_body> rs{res};
  res.body().data = nullptr;
  res.body().size = 0;
  res.body().more = !rp->is_done();
  bool client_ok = true;
  auto write_res = [&]() -> awaitable<bool> {
    for (;;) {
      auto [ec, n] = co_await http::async_write(client, rs, kTok);
      if (ec == http::error::need_buffer) co_return true;
      if (ec) co_return false;
      if (rs.is_done()) co_return true;
    }
  };
  if (ex.hold_response && !switching && req.method() != http::verb::head) {
    // A filter must see the whole body before the guest sees any of it (filter.h).
    std::string body;
    while (!rp->is_done()) {
      res.body().data = io.data();
      res.body().size = io.size();
      auto [ec, n] = co_await http::async_read_some(upstream, up.buf, *rp, kTok);
      if (ec == http::error::need_buffer) ec = {};
      if (ec) {
        up.Reset();
        vault::SecureWipe(body);
        co_await WriteError(client, 502, "upstream response: " + ec.message(), ex.rec);
        co_return false;
      }
      size_t got = io.size() - res.body().size;
      ex.rec.bytes_down += got;
      body.append(io.data(), got);
      if (body.size() > ex.response_hold_max) {
        up.Reset();
        vault::SecureWipe(body);
        co_await WriteError(client, 502,
                            "upstream response body is longer than " +
                                std::to_string(ex.response_hold_max) +
                                " bytes, the most a filter that must see it whole holds",
                            ex.rec);
        co_return false;
      }
    }
    if (Status st = chain_.OnResponseBody(ex, res, body, true); !st.ok()) {
      up.Reset();
      vault::SecureWipe(body);
      co_return co_await Refused(client, ex, st);
    }
    res.erase(http::field::transfer_encoding);
    res.set(http::field::content_length, std::to_string(body.size()));
    http::serializer<false, http::buffer_body> whole{res};
    res.body().data = body.empty() ? nullptr : body.data();
    res.body().size = body.size();
    res.body().more = false;
    for (;;) {
      auto [ec, n] = co_await http::async_write(client, whole, kTok);
      if (ec) {
        client_ok = false;
        break;
      }
      if (whole.is_done()) break;
    }
    vault::SecureWipe(body);
  } else if (rp->is_done()) {
    std::string empty;
    if (Status st = chain_.OnResponseBody(ex, res, empty, true); !st.ok()) {
      up.Reset();
      co_return co_await Refused(client, ex, st);
    }
    client_ok = co_await write_res();
  } else {
    auto [hec, hn] = co_await http::async_write_header(client, rs, kTok);
    client_ok = !hec;
    std::string piece;
    // A Content-Length body is read from the stream straight into `piece` (what the header read
    // left in up.buf first), never past its end: Beast's parser would read into up.buf and copy
    // every byte out again. Chunked (and read-to-close) bodies go through the parser.
    const bool by_length = !rp->chunked() && rp->content_length().has_value();
    if (by_length) {
      uint64_t left = *rp->content_length();
      while (client_ok && left > 0) {
        piece.resize(static_cast<size_t>(std::min<uint64_t>(left, kIoBuffer)));
        size_t got = 0;
        if (up.buf.size() > 0) {
          got = asio::buffer_copy(asio::buffer(piece), up.buf.data());
          up.buf.consume(got);
        } else {
          auto [ec, n] = co_await upstream.async_read_some(asio::buffer(piece), kTok);
          if (ec || n == 0) {
            up_ok = false;  // the head is out: all that is left is to cut the response short
            break;
          }
          got = n;
        }
        piece.resize(got);
        left -= got;
        ex.rec.bytes_down += got;
        if (Status st = chain_.OnResponseBody(ex, res, piece, left == 0); !st.ok()) {
          up_ok = false;
          break;
        }
        res.body().data = piece.empty() ? nullptr : piece.data();
        res.body().size = piece.size();
        if (piece.empty() && left > 0) continue;
        res.body().more = left > 0;
        client_ok = co_await write_res();
      }
    }
    while (!by_length && client_ok && !rp->is_done()) {
      // Chunked or read-to-close: the parser writes the body into `piece`, the string the filters
      // get; the resize zero-fills only what the last piece left unused.
      piece.resize(kIoBuffer);
      res.body().data = piece.data();
      res.body().size = piece.size();
      auto [ec, n] = co_await http::async_read_some(upstream, up.buf, *rp, kTok);
      if (ec == http::error::need_buffer) ec = {};
      if (ec) {
        up_ok = false;
        break;
      }
      size_t got = piece.size() - res.body().size;
      piece.resize(got);
      ex.rec.bytes_down += got;
      if (got == 0 && !rp->is_done()) continue;
      if (Status st = chain_.OnResponseBody(ex, res, piece, rp->is_done()); !st.ok()) {
        up_ok = false;  // the head is out: all that is left is to cut the response short
        break;
      }
      res.body().data = piece.empty() ? nullptr : piece.data();
      res.body().size = piece.size();
      if (piece.empty() && !rp->is_done()) continue;
      res.body().more = !rp->is_done();
      client_ok = co_await write_res();
    }
    piece.resize(piece.capacity());  // all of it: an unredacted piece may have been longer
    vault::SecureWipe(piece);
  }
  ex.rec.latency_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - ex.start).count();
  Record(ex.rec);
  if (!up_ok || !upstream_keep) {
    if (!switching) up.Reset();
  }
  if (!client_ok || !up_ok) co_return false;

  if (switching) {
    // WebSocket (or other upgrade): raw bytes both ways until either side closes.
    // (Not scanned: see docs/threat-model.md.)
    using namespace asio::experimental::awaitable_operators;
    if (cbuf.size() > 0) {
      auto [ec, n] = co_await asio::async_write(upstream, cbuf.data(), kTok);
      if (ec) co_return false;
      cbuf.consume(cbuf.size());
    }
    if (up.buf.size() > 0) {
      auto [ec, n] = co_await asio::async_write(client, up.buf.data(), kTok);
      if (ec) co_return false;
      up.buf.consume(up.buf.size());
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
    co_await (pump(client, upstream) || pump(upstream, client));
    up.Reset();
    co_return false;
  }
  co_return keep;
}

// The instantiations the sessions use (proxy.cc, tls_intercept.cc, tunnel.cc).
template awaitable<void> Proxy::Impl::HttpLoop<TlsStream, ClientTls>(ClientTls&, beast::flat_buffer&,
                                                                     const Origin&);
template awaitable<void> Proxy::Impl::HttpLoop<TcpSocket, GenericSocket>(GenericSocket&,
                                                                         beast::flat_buffer&,
                                                                         const Origin&);
template awaitable<bool> Proxy::Impl::Forward<GenericSocket, TcpSocket>(
    GenericSocket&, beast::flat_buffer&, http::request_parser<http::buffer_body>&, const Origin&,
    UpstreamSlot<TcpSocket>&);

}  // namespace cloister::proxy
