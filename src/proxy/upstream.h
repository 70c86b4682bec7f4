// Upstream connections: resolve (or the tests' overrides), refuse forbidden addresses
// (upstream_address.h), connect, and for TLS verify the upstream against the trust store.
//
// Owned by Proxy::Impl (one per proxy); used from every event loop (its methods keep no state
// between calls but the trust store, which OpenSSL shares across threads).
#pragma once

#include <memory>

#include "base/result.h"
#include "proxy/http_head.h"
#include "proxy/net.h"
#include "proxy/proxy.h"

namespace cloister::proxy {

class UpstreamConnector {
 public:
  explicit UpstreamConnector(const ProxyConfig& config)
      : config_(config), ctx_(ssl::context::tls_client) {}

  // Loads the trust store (config.upstream_ca_file, else the system's) and sets TLS 1.2+, ALPN
  // http/1.1.
  Status Init();

  // A TCP connection to `a` (no_delay), through the resolve overrides or DNS.
  awaitable<Result<TcpSocket>> ConnectTcp(const Authority& a);
  // The upstream leg of a client connection: plain TCP, or TLS verified for a's host.
  awaitable<Result<std::unique_ptr<TcpSocket>>> Open(const Authority& a, TcpSocket*);
  awaitable<Result<std::unique_ptr<TlsStream>>> Open(const Authority& a, TlsStream*);

 private:
  const ProxyConfig& config_;
  ssl::context ctx_;
};

}  // namespace cloister::proxy
