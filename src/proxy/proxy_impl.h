// Internal to the proxy: the Proxy::Impl class. Its methods live in two files:
//   proxy.cc    setup, the event loops, accepting connections (Serve, ListenLoopback), Stop
//   session.cc  one client connection from its first byte: proxy mode (a request loop that may
//               CONNECT), CONNECT tunnels (TLS interception or an opaque splice), transparent mode
// and it composes the parts that have their own classes and headers:
//   tls_intercept.h  TlsInterceptor: terminating the client's TLS (leaf certificates, ALPN, SNI)
//   http_driver.h    HttpDriver: the request loop and each exchange through the chain (chain.h)
//   upstream.h       UpstreamConnector: upstream connections (DNS, address filter, TLS)
// Threading: see proxy.h (one single-threaded event loop per thread; a connection stays on one).
#pragma once

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "proxy/chain.h"
#include "proxy/detector.h"
#include "proxy/exchange.h"
#include "proxy/http_driver.h"
#include "proxy/http_head.h"
#include "proxy/net.h"
#include "proxy/proxy.h"
#include "proxy/tls_intercept.h"
#include "proxy/upstream.h"

namespace cloister::proxy {

class Proxy::Impl {
 public:
  explicit Impl(ProxyConfig config)
      : config_(std::move(config)),
        chain_(DefaultChain()),
        upstreams_(config_),
        driver_(config_, ctx_, chain_, upstreams_, [this](const Exchange& ex) { Trip(ex); }) {}

  ~Impl() { Stop(); }

  Status Init();
  void Serve(int fd, bool transparent, std::string source = "", ClientEndReason why_ended = {});
  Result<uint16_t> ListenLoopback();
  void Stop();
  bool compromised() const { return tripped_.load(); }

 private:
  // session.cc
  awaitable<void> Session(GenericSocket sock, std::string source, ClientEndReason why_ended);
  awaitable<void> TransparentSession(GenericSocket sock, std::string source,
                                     ClientEndReason why_ended);
  // `client`: the proxy-mode connection's origin (its source and end reason).
  awaitable<void> HandleConnect(GenericSocket sock, beast::flat_buffer& cbuf, Authority authority,
                                const Origin& client);
  // The client's bytes in `cbuf` start a TLS handshake: terminate it and serve HTTP inside.
  awaitable<void> InterceptTls(GenericSocket sock, beast::flat_buffer& cbuf, Origin origin,
                               TraceRecord rec);
  // Opaque tunnel: connects to `to` (unless `upstream` is given) and copies bytes both ways.
  awaitable<void> Splice(GenericSocket& sock, beast::flat_buffer& cbuf, const Authority& to,
                         std::optional<TcpSocket> upstream, TraceRecord rec);
  // Reads more client bytes into `buf` within `ms`; false on timeout, error or end of stream.
  awaitable<bool> ReadWithin(GenericSocket& sock, beast::flat_buffer& buf, size_t max, int ms);
  bool OpaqueAllowed(const Authority& a) const;
  bool Allowed(const Authority& a) const { return config_.egress_policy.Allows(a.host, a.port); }
  void Record(const TraceRecord& rec) const { proxy::Record(config_, rec); }

  // proxy.cc
  void Trip(const Exchange& ex);

  ProxyConfig config_;
  std::unique_ptr<PlaceholderSet> placeholders_;
  ProxyContext ctx_;
  Chain chain_;
  TlsInterceptor interceptor_;
  UpstreamConnector upstreams_;
  HttpDriver driver_;
  // One single-threaded event loop per thread; a connection lives on one of them (round robin),
  // so its handlers never hop between threads (no strand, no cross-thread wake-up per I/O).
  struct Loop {
    asio::io_context io{1};
    std::optional<asio::executor_work_guard<asio::io_context::executor_type>> work;
  };
  asio::io_context& NextLoop() { return loops_[next_loop_++ % loops_.size()]->io; }
  std::vector<std::unique_ptr<Loop>> loops_;
  std::atomic<size_t> next_loop_{0};
  std::vector<std::thread> threads_;
  std::unique_ptr<asio::ip::tcp::acceptor> acceptor_;
  std::atomic<bool> tripped_{false};
  std::atomic<bool> stopped_{false};
};

}  // namespace cloister::proxy
