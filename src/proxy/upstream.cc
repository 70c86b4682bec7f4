#include "proxy/upstream.h"

#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "proxy/upstream_address.h"

namespace cloister::proxy {

Status UpstreamConnector::Init() {
  SSL_CTX* cctx = ctx_.native_handle();
  SSL_CTX_set_min_proto_version(cctx, TLS1_2_VERSION);
  error_code ec;
  ctx_.set_verify_mode(ssl::verify_peer, ec);
  if (!config_.upstream_ca_file.empty()) {
    ctx_.load_verify_file(config_.upstream_ca_file, ec);
    if (ec) {
      return Error(ErrorCode::kInvalidArgument,
                   "cannot load upstream CA file " + config_.upstream_ca_file + ": " + ec.message());
    }
  } else {
    ctx_.set_default_verify_paths(ec);
    if (ec) return Error(ErrorCode::kUnavailable, "no system trust store: " + ec.message());
  }
  static const unsigned char kAlpn[] = "\x08http/1.1";
  SSL_CTX_set_alpn_protos(cctx, kAlpn, sizeof kAlpn - 1);
  return OkStatus();
}

Status UpstreamConnector::AddLoop(asio::io_context& io) {
  ASSIGN_OR_RETURN(resolvers_[&io], Resolver::Create(io, config_.dns_servers));
  return OkStatus();
}

awaitable<Result<TcpSocket>> UpstreamConnector::ConnectTcp(const Authority& a, TraceRecord* rec) {
  TraceRecord scratch;
  if (!rec) rec = &scratch;
  auto ex = co_await asio::this_coro::executor;
  TcpSocket sock(ex);
  std::string key = a.HostPort();
  auto it = config_.resolve.find(key);
  std::vector<asio::ip::tcp::endpoint> endpoints;
  auto dns_start = std::chrono::steady_clock::now();
  if (it != config_.resolve.end()) {
    auto mapped = ParseAuthority(it->second, 0);
    error_code ec;
    auto addr = mapped.ok() ? asio::ip::make_address(mapped->host, ec) : asio::ip::address();
    if (!mapped.ok() || ec) {
      co_return Error(ErrorCode::kInvalidArgument, "bad resolve override for " + key);
    }
    endpoints.emplace_back(addr, mapped->port);
    rec->phases.dns_ms = MsSince(dns_start);
  } else {
    if (config_.resolve_only) {
      co_return Error(ErrorCode::kUnavailable, key + " is not in the resolve overrides");
    }
    auto found = resolvers_.find(&asio::query(ex, asio::execution::context));
    if (found == resolvers_.end()) co_return Error(ErrorCode::kInternal, "no resolver on this loop");
    auto results = co_await found->second->Resolve(a.host);
    rec->phases.dns_ms = MsSince(dns_start);
    if (!results.ok()) {
      rec->abort = kAbortUpstreamRefused;
      co_return results.error();
    }
    // SECURITY: a guest-chosen name must not lead to the host's own services or link-local
    // metadata endpoints.
    // The host's interface addresses, read once per connection (they change: a docker bridge
    // comes and goes); SECURITY: fail closed when they cannot be read.
    auto local = LocalInterfaceAddresses();
    if (!local.ok()) co_return local.error();
    for (const asio::ip::address& addr : *results) {
      if (!UpstreamRefusal(addr, config_.egress_policy, a.host, a.port, *local)) {
        endpoints.emplace_back(addr, a.port);
      }
    }
    if (endpoints.empty()) {
      co_return Error(ErrorCode::kPermissionDenied,
                      a.host + " resolves to a loopback, link-local, cloud metadata, host-interface "
                      "or private address only (docs/threat-model.md: upstream addresses)",
                      "a private host must be named in the egress policy: cloister egress NAME "
                      "--allow HOST --allow-all");
    }
  }
  auto connect_start = std::chrono::steady_clock::now();
  Deadline deadline(ex, config_.upstream_connect_ms, [&sock] {
    error_code ec;
    sock.cancel(ec);
  });
  auto [cec, ep] = co_await asio::async_connect(sock, endpoints, kTok);
  deadline.Disarm();
  if (deadline.expired()) {
    rec->abort = kAbortUpstreamTimeout;
    co_return Error(ErrorCode::kUnavailable, "connect " + key + ": no answer within " +
                                                 std::to_string(config_.upstream_connect_ms) +
                                                 " ms");
  }
  if (cec) {
    rec->abort = kAbortUpstreamRefused;
    co_return Error(ErrorCode::kUnavailable, "connect " + key + ": " + cec.message());
  }
  rec->phases.connect_ms = MsSince(connect_start);
  error_code ec;
  sock.set_option(asio::ip::tcp::no_delay(true), ec);
  co_return std::move(sock);
}

awaitable<Result<std::unique_ptr<TcpSocket>>> UpstreamConnector::Open(const Authority& a,
                                                                       TcpSocket*,
                                                                       TraceRecord* rec) {
  auto sock = co_await ConnectTcp(a, rec);
  if (!sock.ok()) co_return sock.error();
  co_return std::make_unique<TcpSocket>(std::move(sock).value());
}

awaitable<Result<std::unique_ptr<TlsStream>>> UpstreamConnector::Open(const Authority& a,
                                                                       TlsStream*,
                                                                       TraceRecord* rec) {
  auto sock = co_await ConnectTcp(a, rec);
  if (!sock.ok()) co_return sock.error();
  auto tls = std::make_unique<TlsStream>(std::move(sock).value(), ctx_);
  SSL* s = tls->native_handle();
  bool ip = a.host.find_first_not_of("0123456789.") == std::string::npos ||
            a.host.find(':') != std::string::npos;
  if (ip) {
    X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(s), a.host.c_str());
  } else {
    SSL_set_tlsext_host_name(s, a.host.c_str());
    SSL_set1_host(s, a.host.c_str());
  }
  auto tls_start = std::chrono::steady_clock::now();
  TlsStream* raw = tls.get();
  Deadline deadline(co_await asio::this_coro::executor, config_.upstream_connect_ms, [raw] {
    error_code ec;
    raw->next_layer().cancel(ec);
  });
  auto [ec] = co_await tls->async_handshake(ssl::stream_base::client, kTok);
  deadline.Disarm();
  if (deadline.expired()) {
    if (rec) rec->abort = kAbortUpstreamTimeout;
    co_return Error(ErrorCode::kUnavailable, "TLS to " + a.HostPort() + ": no handshake within " +
                                                 std::to_string(config_.upstream_connect_ms) +
                                                 " ms");
  }
  if (ec) {
    long vr = SSL_get_verify_result(s);
    std::string why = vr != X509_V_OK ? std::string("certificate verification failed: ") +
                                            X509_verify_cert_error_string(vr)
                                      : ec.message();
    if (rec) rec->abort = kAbortUpstreamRefused;
    co_return Error(ErrorCode::kUnavailable, "TLS to " + a.HostPort() + ": " + why);
  }
  if (rec) rec->phases.tls_ms = MsSince(tls_start);
  co_return tls;
}

}  // namespace cloister::proxy
