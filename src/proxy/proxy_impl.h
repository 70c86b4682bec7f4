// Internal to the proxy: the Proxy::Impl class, shared by the files that implement it.
//   proxy.cc          setup, accept loops (Serve, ListenLoopback), proxy-mode sessions, Stop
//   tls_intercept.cc  terminating the client's TLS (leaf certificates, ALPN, SNI checks)
//   tunnel.cc         CONNECT handling, opaque tunnels (splice), transparent-mode sessions
//   http_driver.cc    the HTTP request loop and the driver that runs the filter chain (chain.h)
//   upstream.cc       upstream connections (DNS, address filter, TLS verification)
// Threading: see proxy.h (one single-threaded event loop per thread; a connection stays on one).
#pragma once

#include <atomic>
#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "proxy/chain.h"
#include "proxy/detector.h"
#include "proxy/exchange.h"
#include "proxy/http_head.h"
#include "proxy/proxy.h"
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

class Proxy::Impl {
 public:
  explicit Impl(ProxyConfig config)
      : config_(std::move(config)),
        server_ctx_(ssl::context::tls_server),
        client_ctx_(ssl::context::tls_client),
        chain_(DefaultChain()) {}

  ~Impl() { Stop(); }

  Status Init();
  void Serve(int fd, bool transparent, std::string source = "");
  Result<uint16_t> ListenLoopback();
  void Stop();
  bool compromised() const { return tripped_.load(); }

 private:
  awaitable<void> Session(GenericSocket sock, std::string source);
  awaitable<void> TransparentSession(GenericSocket sock, std::string source);
  template <class Up, class Client>
  awaitable<void> HttpLoop(Client& client, beast::flat_buffer& cbuf, const Origin& origin);
  awaitable<void> HandleConnect(GenericSocket sock, beast::flat_buffer& cbuf, Authority authority,
                                std::string source);
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
  // Relays one request and its response through the chain. Returns whether the client connection
  // may be reused.
  template <class Client, class Up>
  awaitable<bool> Forward(Client& client, beast::flat_buffer& cbuf,
                          http::request_parser<http::buffer_body>& parser, const Origin& origin,
                          UpstreamSlot<Up>& up);
  // A chain refusal: 451 and a trip when the exchange holds out-of-scope hits, else the
  // exchange's reply status. Always false (the connection closes).
  template <class Client>
  awaitable<bool> Refused(Client& client, Exchange& ex, const Status& st);
  template <class Client>
  awaitable<void> WriteError(Client& client, int status, const std::string& reason,
                             TraceRecord rec);

  awaitable<Result<TcpSocket>> ConnectTcp(const Authority& a);
  awaitable<Result<std::unique_ptr<TcpSocket>>> OpenUpstream(const Authority& a, TcpSocket*);
  awaitable<Result<std::unique_ptr<TlsStream>>> OpenUpstream(const Authority& a, TlsStream*);

  void Trip(const Exchange& ex);
  void Record(TraceRecord rec) {
    if (config_.trace) config_.trace->Write(rec);
  }

  static int CertCallback(SSL* ssl, void* arg);
  static int AlpnSelect(SSL*, const unsigned char** out, unsigned char* outlen,
                        const unsigned char* in, unsigned int inlen, void*);

  ProxyConfig config_;
  std::unique_ptr<PlaceholderSet> placeholders_;
  ProxyContext ctx_;
  ssl::context server_ctx_;
  ssl::context client_ctx_;
  Chain chain_;
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

template <class Client>
awaitable<void> Proxy::Impl::WriteError(Client& client, int status, const std::string& reason,
                                        TraceRecord rec) {
  http::response<http::string_body> res{static_cast<http::status>(status), 11};
  res.set(http::field::content_type, "text/plain");
  res.set(http::field::connection, "close");
  res.set("X-Cloister-Proxy", "1");
  res.body() = "cloister proxy: " + reason + "\n";
  res.prepare_payload();
  co_await http::async_write(client, res, kTok);
  rec.status = status;
  rec.error = reason;
  Record(std::move(rec));
}

}  // namespace cloister::proxy
