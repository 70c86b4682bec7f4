// Upstream connections: resolve (or the tests' overrides), refuse forbidden addresses
// (upstream_address.h), connect, and for TLS verify the upstream against the trust store.
//
// Owned by Proxy::Impl (one per proxy); used from every event loop (its methods keep no state
// between calls but the trust store, which OpenSSL shares across threads).
#pragma once

#include <map>
#include <memory>

#include "base/result.h"
#include "proxy/http_head.h"
#include "proxy/net.h"
#include "proxy/proxy.h"
#include "proxy/resolver.h"
#include "proxy/trace.h"

namespace cloister::proxy {

class UpstreamConnector {
 public:
  explicit UpstreamConnector(const ProxyConfig& config)
      : config_(config), ctx_(ssl::context::tls_client) {}

  // Loads the trust store (config.upstream_ca_file, else the system's) and sets TLS 1.2+, ALPN
  // http/1.1.
  Status Init();
  // Gives the event loop `io` its resolver (resolver.h); before the loops run.
  Status AddLoop(asio::io_context& io);

  // A TCP connection to `a` (no_delay), through the resolve overrides or DNS, within
  // config.upstream_connect_ms. `rec` (may be null) gets the phases reached (dns, connect) and,
  // when no connection could be made, the abort code (upstream_refused or upstream_timeout; a
  // refusal of the proxy's own, such as a forbidden address, leaves it empty).
  awaitable<Result<TcpSocket>> ConnectTcp(const Authority& a, TraceRecord* rec = nullptr);
  // The upstream leg of a client connection: plain TCP, or TLS verified for a's host (its
  // handshake within config.upstream_connect_ms too; the tls phase in `rec`).
  awaitable<Result<std::unique_ptr<TcpSocket>>> Open(const Authority& a, TcpSocket*,
                                                     TraceRecord* rec);
  awaitable<Result<std::unique_ptr<TlsStream>>> Open(const Authority& a, TlsStream*,
                                                     TraceRecord* rec);

 private:
  const ProxyConfig& config_;
  ssl::context ctx_;
  // One per event loop, filled before the loops run (read-only after).
  std::map<const asio::execution_context*, std::unique_ptr<Resolver>> resolvers_;
};

}  // namespace cloister::proxy
