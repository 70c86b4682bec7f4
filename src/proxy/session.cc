// One client connection of the proxy, from its first byte: proxy mode (the request loop, which may
// end in a CONNECT), CONNECT tunnels (TLS interception or an opaque splice), transparent mode.
#include <algorithm>
#include <boost/asio/experimental/awaitable_operators.hpp>

#include "proxy/proxy_impl.h"
#include "proxy/transparent.h"
#include "vault/credential.h"

namespace cloister::proxy {
namespace {

// Looks like the start of an HTTP/1.x request line: a method token of capital letters and a space.
// 1: yes, 0: no, -1: undecided (all capitals so far, fewer than 20 bytes).
int LooksLikeHttp(std::string_view b) {
  for (size_t i = 0; i < b.size() && i < 20; ++i) {
    char c = b[i];
    if (c == ' ') return i > 0 ? 1 : 0;
    if (c < 'A' || c > 'Z') return 0;
  }
  return b.size() >= 20 ? 0 : -1;
}

}  // namespace

// Proxy mode: the request loop reads each request; a CONNECT takes the socket over.
awaitable<void> Proxy::Impl::Session(GenericSocket sock, std::string source,
                                     ClientEndReason why_ended) {
  beast::flat_buffer cbuf;
  cbuf.reserve(kIoBuffer);  // read size = capacity (see UpstreamSlot)
  Origin plain;
  plain.source = source;
  plain.end_reason = std::move(why_ended);
  std::optional<Authority> connect = co_await driver_.Serve<TcpSocket>(sock, cbuf, plain);
  if (connect) co_await HandleConnect(std::move(sock), cbuf, *connect, plain);
}

awaitable<void> Proxy::Impl::HandleConnect(GenericSocket sock, beast::flat_buffer& cbuf,
                                           Authority authority, const Origin& client) {
  TraceRecord rec;
  rec.time_ms = NowMs();
  rec.source = client.source;
  auto start = std::chrono::steady_clock::now();
  // A tunnel the client leaves before it carried a request still gets its record.
  auto gone = [&](const std::string& when) {
    rec.abort = client.ClientAbort();
    rec.error = "the client went away " + when;
    rec.latency_ms = MsSince(start);
    Record(rec);
  };
  rec.method = "CONNECT";
  rec.host = authority.host;
  rec.port = authority.port;
  static const std::string kOk = "HTTP/1.1 200 Connection established\r\n\r\n";
  if (tripped_) {
    // SECURITY: from the moment of a trip, no new tunnel opens (the VM's pause lands later).
    co_await WriteError(sock, 451, "workspace is compromised; nothing is forwarded", rec,
                        config_);
    co_return;
  }
  if (!Allowed(authority)) {
    co_await WriteError(sock, 403, "egress policy: " + authority.HostPort() + " is not allowed",
                        rec, config_);
    co_return;
  }
  if (std::find(config_.tunnel_ports.begin(), config_.tunnel_ports.end(), authority.port) !=
      config_.tunnel_ports.end()) {
    // An opaque tunnel (SSH): only toward allowed hosts; connect first so a refusal is an HTTP
    // status the client can report.
    if (!vault::HostInAnyScope(authority.host, config_.tunnel_hosts)) {
      co_await WriteError(sock, 403, "tunnel to " + authority.HostPort() + " is not allowed", rec,
                          config_);
      co_return;
    }
    auto upstream = co_await upstreams_.ConnectTcp(authority);
    if (!upstream.ok()) {
      co_await WriteError(sock, 502, upstream.error().message(), rec, config_);
      co_return;
    }
    auto [wec, wn] = co_await asio::async_write(sock, asio::buffer(kOk), kTok);
    if (wec) co_return gone("before the tunnel opened");
    co_await Splice(sock, cbuf, authority, std::move(upstream).value(), rec);
    co_return;
  }
  auto [wec, wn] = co_await asio::async_write(sock, asio::buffer(kOk), kTok);
  if (wec) co_return gone("before the tunnel opened");
  // SECURITY: only TLS goes through a tunnel (opaque bytes would bypass the detector), unless the
  // egress policy names this host:port explicitly (an opaque tunnel, never on 80/443).
  if (cbuf.size() == 0) {
    auto [rec2, rn] = co_await sock.async_read_some(cbuf.prepare(kIoBuffer), kTok);
    if (rec2) co_return gone("before sending a byte into the tunnel");
    cbuf.commit(rn);
  }
  const auto* first = static_cast<const unsigned char*>(cbuf.data().data());
  if (cbuf.size() == 0 || first[0] != 0x16) {
    if (config_.egress_policy.AllowsOpaque(authority.host, authority.port)) {
      co_await Splice(sock, cbuf, authority, std::nullopt, rec);
      co_return;
    }
    rec.status = 400;
    rec.error = "tunnel is not TLS";
    Record(rec);
    co_return;
  }
  Origin origin = client;
  origin.tls = true;
  origin.connect = authority;
  co_await InterceptTls(std::move(sock), cbuf, origin, rec);
}

awaitable<void> Proxy::Impl::InterceptTls(GenericSocket sock, beast::flat_buffer& cbuf,
                                          Origin origin, TraceRecord rec) {
  ClientTls tls(std::move(sock), interceptor_.context());
  Status st = co_await interceptor_.Handshake(tls, cbuf, origin);
  if (!st.ok()) {
    if (st.error().code() == ErrorCode::kUnavailable) {
      rec.abort = origin.ClientAbort();  // gone during the handshake: nobody to answer
    } else {
      rec.status = st.error().code() == ErrorCode::kPermissionDenied ? 421 : 400;
    }
    rec.error = st.error().message();
    Record(rec);
    if (rec.status == 421) {
      error_code ec;
      tls.next_layer().shutdown(asio::socket_base::shutdown_both, ec);
    }
    co_return;
  }
  co_await driver_.Serve<TlsStream>(tls, cbuf, origin);
  error_code ec;
  tls.next_layer().shutdown(asio::socket_base::shutdown_both, ec);
}

awaitable<void> Proxy::Impl::Splice(GenericSocket& sock, beast::flat_buffer& cbuf,
                                    const Authority& to, std::optional<TcpSocket> connected,
                                    TraceRecord rec) {
  if (tripped_) {
    // SECURITY: a trip between the CONNECT (or the transparent header) and here still refuses.
    rec.status = 451;
    rec.error = "workspace is compromised; nothing is forwarded";
    Record(rec);
    co_return;
  }
  if (!connected) {
    auto up = co_await upstreams_.ConnectTcp(to);
    if (!up.ok()) {
      rec.status = 502;
      rec.error = up.error().message();
      Record(rec);
      co_return;
    }
    connected.emplace(std::move(up).value());
  }
  TcpSocket& upstream = *connected;
  auto start = std::chrono::steady_clock::now();
  uint64_t up_bytes = 0, down_bytes = 0;
  if (cbuf.size() > 0) {
    auto [ec, n] = co_await asio::async_write(upstream, cbuf.data(), kTok);
    if (ec) co_return;
    up_bytes += n;
    cbuf.consume(cbuf.size());
  }
  using namespace asio::experimental::awaitable_operators;
  auto pump = [](auto& from, auto& to, uint64_t& count) -> awaitable<void> {
    std::vector<char> buf(kIoBuffer);
    for (;;) {
      auto [ec, n] = co_await from.async_read_some(asio::buffer(buf), kTok);
      if (ec) break;
      auto [wec2, wn2] = co_await asio::async_write(to, asio::buffer(buf.data(), n), kTok);
      if (wec2) break;
      count += n;
    }
    // Half-close so the other direction can finish (ssh waits for the server's last bytes).
    error_code sec;
    to.shutdown(asio::socket_base::shutdown_send, sec);
  };
  co_await (pump(sock, upstream, up_bytes) && pump(upstream, sock, down_bytes));
  rec.status = 200;
  rec.path = "(tunnel)";
  rec.bytes_up = up_bytes;
  rec.bytes_down = down_bytes;
  rec.latency_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  Record(rec);
}

bool Proxy::Impl::OpaqueAllowed(const Authority& a) const {
  if (a.port == 80 || a.port == 443) return false;
  if (config_.egress_policy.AllowsOpaque(a.host, a.port)) return true;
  return std::find(config_.tunnel_ports.begin(), config_.tunnel_ports.end(), a.port) !=
             config_.tunnel_ports.end() &&
         vault::HostInAnyScope(a.host, config_.tunnel_hosts);
}

awaitable<bool> Proxy::Impl::ReadWithin(GenericSocket& sock, beast::flat_buffer& buf, size_t max,
                                        int ms) {
  using namespace asio::experimental::awaitable_operators;
  asio::steady_timer timer(co_await asio::this_coro::executor);
  timer.expires_after(std::chrono::milliseconds(ms));
  auto res = co_await (sock.async_read_some(buf.prepare(max), kTok) || timer.async_wait(kTok));
  if (res.index() != 0) co_return false;
  auto [ec, n] = std::get<0>(res);
  if (ec || n == 0) co_return false;
  buf.commit(n);
  co_return true;
}

awaitable<void> Proxy::Impl::TransparentSession(GenericSocket sock, std::string source,
                                                ClientEndReason why_ended) {
  TraceRecord rec;
  rec.time_ms = NowMs();
  rec.source = source;
  rec.mode = "transparent";
  beast::flat_buffer cbuf;
  cbuf.reserve(kIoBuffer);
  // SECURITY: the header is guest bytes: at most kMaxTransparentHeader, within the idle deadline.
  auto deadline = std::chrono::steady_clock::now() +
                  std::chrono::milliseconds(config_.transparent_idle_ms);
  auto left_ms = [&] {
    return std::max<int>(0, static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                                 deadline - std::chrono::steady_clock::now())
                                                 .count()));
  };
  auto view = [&] {
    return std::string_view(static_cast<const char*>(cbuf.data().data()), cbuf.size());
  };
  size_t nl = std::string_view::npos;
  while ((nl = view().find('\n')) == std::string_view::npos) {
    if (cbuf.size() >= kMaxTransparentHeader) break;
    if (!co_await ReadWithin(sock, cbuf, kMaxTransparentHeader - cbuf.size(), left_ms())) break;
  }
  if (nl == std::string_view::npos || nl + 1 > kMaxTransparentHeader) {
    if (cbuf.size() == 0) co_return;  // the guest gave up before sending anything
    rec.status = 400;
    rec.error = "malformed transparent header";
    Record(rec);
    co_return;
  }
  auto parsed = ParseTransparentHeader(view().substr(0, nl));
  if (!parsed.ok()) {
    rec.status = 400;
    rec.error = parsed.error().message();
    Record(rec);
    co_return;
  }
  cbuf.consume(nl + 1);
  Authority a = *parsed;
  rec.host = a.host;
  rec.port = a.port;
  if (!Allowed(a)) {
    rec.status = 403;
    rec.error = "egress policy: " + a.HostPort() + " is not allowed";
    Record(rec);
    co_return;
  }
  if (tripped_) {
    rec.status = 451;
    rec.error = "workspace is compromised; nothing is forwarded";
    Record(rec);
    co_return;
  }
  bool opaque = OpaqueAllowed(a);
  // Sniff the client's first bytes: TLS, HTTP, or something else (or nothing).
  int wait_ms = opaque ? config_.transparent_sniff_ms : left_ms();
  int verdict = -1;  // 1 tls, 2 http, 0 other
  while (verdict < 0) {
    std::string_view b = view();
    if (!b.empty()) {
      if (static_cast<unsigned char>(b[0]) == 0x16) {
        verdict = 1;
        break;
      }
      int http = LooksLikeHttp(b);
      if (http >= 0) {
        verdict = http ? 2 : 0;
        break;
      }
    }
    if (!co_await ReadWithin(sock, cbuf, kIoBuffer, wait_ms)) break;
  }
  Origin origin;
  origin.transparent = true;
  origin.connect = a;
  origin.source = source;
  origin.end_reason = std::move(why_ended);
  if (verdict == 1) {
    origin.tls = true;
    co_await InterceptTls(std::move(sock), cbuf, origin, rec);
    co_return;
  }
  if (verdict == 2) {
    co_await driver_.Serve<TcpSocket>(sock, cbuf, origin);
    error_code ec;
    sock.shutdown(asio::socket_base::shutdown_both, ec);
    co_return;
  }
  if (opaque) {
    co_await Splice(sock, cbuf, a, std::nullopt, rec);
    co_return;
  }
  rec.status = 403;
  rec.error = cbuf.size() == 0
                  ? "no client bytes, and " + a.HostPort() + " is not an opaque tunnel"
                  : "neither TLS nor HTTP, and " + a.HostPort() + " is not an opaque tunnel";
  Record(rec);
}

}  // namespace cloister::proxy
