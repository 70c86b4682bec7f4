#include "proxy/proxy.h"

#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <boost/asio.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <optional>
#include <set>
#include <thread>
#include <variant>

#include "base/strings.h"
#include "proxy/detector.h"
#include "proxy/http_head.h"
#include "proxy/transparent.h"
#include "proxy/upstream_address.h"
#include "vault/crypto.h"

namespace cloister::proxy {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace ssl = asio::ssl;
using asio::awaitable;
using boost::system::error_code;
using GenericSocket = asio::generic::stream_protocol::socket;
using TcpSocket = asio::ip::tcp::socket;
using TlsStream = ssl::stream<TcpSocket>;
constexpr auto kTok = asio::as_tuple(asio::use_awaitable);
constexpr size_t kIoBuffer = 64 * 1024;

std::optional<std::string> SubstituteInHeader(std::string_view value, std::string_view placeholder,
                                              std::string_view real) {
  if (placeholder.empty()) return std::nullopt;
  auto replace_all = [&](std::string s) -> std::optional<std::string> {
    bool found = false;
    for (size_t pos = s.find(placeholder); pos != std::string::npos;
         pos = s.find(placeholder, pos + real.size())) {
      s.replace(pos, placeholder.size(), real);
      found = true;
    }
    if (!found) return std::nullopt;
    return s;
  };
  if (auto direct = replace_all(std::string(value))) return direct;
  if (value.size() > 6 && ToLower(value.substr(0, 6)) == "basic ") {
    auto decoded = vault::Base64Decode(Trim(value.substr(6)));
    if (!decoded.ok()) return std::nullopt;
    auto swapped = replace_all(*decoded);
    vault::SecureWipe(decoded.value());
    if (!swapped) return std::nullopt;
    std::string out = std::string(value.substr(0, 6)) + vault::Base64Encode(*swapped);
    vault::SecureWipe(*swapped);
    return out;
  }
  return std::nullopt;
}

namespace {

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// The client connection's view of where requests go.
struct Origin {
  bool tls = false;
  // Transparent mode: `connect` is the header's host:port, for plain HTTP too (the request's Host
  // must name it), and a TLS SNI must name it as well.
  bool transparent = false;
  Authority connect;  // CONNECT authority (tls or transparent)
  std::string sni;    // client's SNI, lower-case, "" if none (tls only)
};

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

bool IsHopByHop(std::string_view name) {
  static const std::set<std::string> kHop = {"proxy-connection", "proxy-authorization",
                                             "keep-alive", "te", "trailer", "proxy-authenticate"};
  return kHop.count(ToLower(name)) > 0;
}

RequestHead HeadFrom(const http::request<http::buffer_body>& req, const Authority& target) {
  RequestHead h;
  h.method = std::string(req.method_string());
  h.target = std::string(req.target());
  h.host = target.host;
  h.port = target.port;
  for (const auto& f : req) h.headers.push_back({std::string(f.name_string()), std::string(f.value())});
  return h;
}

void ApplyHead(const RequestHead& h, http::request<http::buffer_body>& req) {
  std::vector<std::string> names;
  for (const auto& f : req) names.push_back(std::string(f.name_string()));
  for (const auto& n : names) req.erase(n);
  for (const auto& [name, value] : h.headers) req.insert(name, value);
  req.target(h.target);
}

bool ValidSni(const char* sni) {
  if (!sni) return false;
  std::string_view s(sni);
  if (s.empty() || s.size() > 253) return false;
  for (char c : s) {
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
          c == '-' || c == '.' || c == '_')) {
      return false;
    }
  }
  return true;
}

// Replaces real values by their placeholders in a response stream, so an upstream that reflects
// a credential (an error message quoting the key) never hands the real value to the guest.
// Holds back only a tail that could be the start of a real value (never a whole SSE event).
class Redactor {
 public:
  void Add(const std::string& real, const std::string& placeholder) {
    // Keep lengths (Content-Length stays right): a placeholder of another length becomes x's.
    pairs_.push_back({real, placeholder.size() == real.size() ? placeholder
                                                              : std::string(real.size(), 'x')});
  }
  bool active() const { return !pairs_.empty(); }
  std::string Apply(std::string s) const {
    for (const auto& [real, ph] : pairs_) {
      for (size_t pos = s.find(real); pos != std::string::npos; pos = s.find(real, pos + 1)) {
        s.replace(pos, real.size(), ph);
      }
    }
    return s;
  }
  // Returns what can be sent now.
  std::string Feed(std::string_view in, bool last) {
    pending_.append(in);
    std::string all = Apply(std::move(pending_));
    pending_.clear();
    size_t hold = 0;
    if (!last) {
      for (const auto& [real, ph] : pairs_) {
        for (size_t k = std::min(all.size(), real.size() - 1); k > hold; --k) {
          if (all.compare(all.size() - k, k, real, 0, k) == 0) {
            hold = k;
            break;
          }
        }
      }
    }
    pending_ = all.substr(all.size() - hold);
    all.resize(all.size() - hold);
    return all;
  }
  ~Redactor() {
    vault::SecureWipe(pending_);
    for (auto& p : pairs_) vault::SecureWipe(p.first);
  }

 private:
  std::vector<std::pair<std::string, std::string>> pairs_;
  std::string pending_;
};

}  // namespace

class Proxy::Impl {
 public:
  explicit Impl(ProxyConfig config)
      : config_(std::move(config)),
        server_ctx_(ssl::context::tls_server),
        client_ctx_(ssl::context::tls_client) {}

  ~Impl() { Stop(); }

  Status Init();
  void Serve(int fd, bool transparent);
  Result<uint16_t> ListenLoopback();
  void Stop();
  bool compromised() const { return tripped_.load(); }

 private:
  // Per-request state shared by the helpers below.
  struct Request {
    TraceRecord rec;
    std::chrono::steady_clock::time_point start;
    Authority target;
    std::vector<std::string> hosts;  // every name the request claims: target, Host, SNI
    bool names_agree = false;        // SNI == CONNECT host == Host header (TLS only)
    std::vector<size_t> in_scope;    // credentials whose scope holds every name
    std::vector<LeakFlag> block;     // out-of-scope hits (non-empty: 451)
  };

  awaitable<void> Session(GenericSocket sock);
  awaitable<void> TransparentSession(GenericSocket sock);
  template <class Up, class Client>
  awaitable<void> HttpLoop(Client& client, beast::flat_buffer& cbuf, const Origin& origin);
  awaitable<void> HandleConnect(GenericSocket sock, beast::flat_buffer& cbuf, Authority authority);
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
  template <class Client, class Up>
  awaitable<bool> Forward(Client& client, beast::flat_buffer& cbuf,
                          http::request_parser<http::buffer_body>& parser, const Origin& origin,
                          UpstreamSlot<Up>& up);
  template <class Client>
  awaitable<void> WriteError(Client& client, int status, const std::string& reason,
                             TraceRecord rec);

  awaitable<Result<TcpSocket>> ConnectTcp(const Authority& a);
  awaitable<Result<std::unique_ptr<TcpSocket>>> OpenUpstream(const Authority& a, TcpSocket*);
  awaitable<Result<std::unique_ptr<TlsStream>>> OpenUpstream(const Authority& a, TlsStream*);

  void ClassifyHits(const std::vector<Hit>& hits, const std::string& where, Request& r,
                    bool body);
  bool IsLlmHost(const std::string& host) const;
  void Trip(const Request& r);
  void Record(TraceRecord rec) {
    if (config_.trace) config_.trace->Write(rec);
  }

  static int CertCallback(SSL* ssl, void* arg);
  static int AlpnSelect(SSL*, const unsigned char** out, unsigned char* outlen,
                        const unsigned char* in, unsigned int inlen, void*);

  ProxyConfig config_;
  std::unique_ptr<PlaceholderSet> placeholders_;
  ssl::context server_ctx_;
  ssl::context client_ctx_;
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

// ---------------------------------------------------------------------------------------------
// Setup

// The CONNECT host of a client handshake in progress, for CertCallback. Kept in SSL ex data of
// our own index, never in the SSL's app data: Asio's SSL engine owns that slot (its verify
// callback) and deletes whatever it holds when the stream is destroyed, which a session torn down
// mid-handshake (proxy shutdown) would otherwise turn into a delete of a std::string*.
namespace {
int ConnectHostIndex() {
  static const int index = SSL_get_ex_new_index(0, nullptr, nullptr, nullptr, nullptr);
  return index;
}
}  // namespace

int Proxy::Impl::AlpnSelect(SSL*, const unsigned char** out, unsigned char* outlen,
                            const unsigned char* in, unsigned int inlen, void*) {
  // SECURITY: `in` is the client's ALPN list (length-prefixed strings); walk it bounded.
  for (unsigned i = 0; i < inlen;) {
    unsigned len = in[i];
    if (i + 1 + len > inlen) break;
    if (len == 8 && memcmp(in + i + 1, "http/1.1", 8) == 0) {
      *out = in + i + 1;
      *outlen = 8;
      return SSL_TLSEXT_ERR_OK;
    }
    i += 1 + len;
  }
  return SSL_TLSEXT_ERR_NOACK;
}

int Proxy::Impl::CertCallback(SSL* ssl, void* arg) {
  auto* self = static_cast<Impl*>(arg);
  const char* sni = SSL_get_servername(ssl, TLSEXT_NAMETYPE_host_name);
  std::string host;
  if (ValidSni(sni)) {
    host = ToLower(sni);
  } else if (auto* connect_host =
                 static_cast<std::string*>(SSL_get_ex_data(ssl, ConnectHostIndex()))) {
    host = *connect_host;
  }
  if (host.empty()) return 0;
  auto leaf = self->config_.ca->Leaf(host);
  if (!leaf.ok()) return 0;
  if (SSL_use_certificate(ssl, leaf->get()) != 1 ||
      SSL_use_PrivateKey(ssl, self->config_.ca->leaf_key()) != 1) {
    return 0;
  }
  return 1;
}

Status Proxy::Impl::Init() {
  if (!config_.ca) return Error(ErrorCode::kInvalidArgument, "proxy: no CA");
  std::vector<std::string> phs;
  for (const auto& b : config_.credentials) phs.push_back(b.placeholder);
  placeholders_ = std::make_unique<PlaceholderSet>(phs);

  SSL_CTX* sctx = server_ctx_.native_handle();
  SSL_CTX_set_min_proto_version(sctx, TLS1_2_VERSION);
  SSL_CTX_set_cert_cb(sctx, &Impl::CertCallback, this);
  SSL_CTX_set_alpn_select_cb(sctx, &Impl::AlpnSelect, nullptr);
  SSL_CTX_set_session_cache_mode(sctx, SSL_SESS_CACHE_SERVER);
  SSL_CTX_set_session_id_context(sctx, reinterpret_cast<const unsigned char*>("cloister"), 8);

  SSL_CTX* cctx = client_ctx_.native_handle();
  SSL_CTX_set_min_proto_version(cctx, TLS1_2_VERSION);
  error_code ec;
  client_ctx_.set_verify_mode(ssl::verify_peer, ec);
  if (!config_.upstream_ca_file.empty()) {
    client_ctx_.load_verify_file(config_.upstream_ca_file, ec);
    if (ec) {
      return Error(ErrorCode::kInvalidArgument,
                   "cannot load upstream CA file " + config_.upstream_ca_file + ": " + ec.message());
    }
  } else {
    client_ctx_.set_default_verify_paths(ec);
    if (ec) return Error(ErrorCode::kUnavailable, "no system trust store: " + ec.message());
  }
  static const unsigned char kAlpn[] = "\x08http/1.1";
  SSL_CTX_set_alpn_protos(cctx, kAlpn, sizeof kAlpn - 1);

  int n = std::max(1, config_.threads);
  for (int i = 0; i < n; ++i) {
    loops_.push_back(std::make_unique<Loop>());
    loops_.back()->work.emplace(loops_.back()->io.get_executor());
  }
  for (int i = 0; i < n; ++i) threads_.emplace_back([this, i] { loops_[i]->io.run(); });
  return OkStatus();
}

void Proxy::Impl::Serve(int fd, bool transparent) {
  if (stopped_) {
    close(fd);
    return;
  }
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  int family = AF_UNIX;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) == 0) family = ss.ss_family;
  asio::io_context& io = NextLoop();
  error_code ec;
  GenericSocket sock(io);
  sock.assign(asio::generic::stream_protocol(family, SOCK_STREAM), fd, ec);
  if (ec) {
    close(fd);
    return;
  }
  if (transparent) {
    asio::co_spawn(io, TransparentSession(std::move(sock)), asio::detached);
  } else {
    asio::co_spawn(io, Session(std::move(sock)), asio::detached);
  }
}

Result<uint16_t> Proxy::Impl::ListenLoopback() {
  using asio::ip::tcp;
  error_code ec;
  acceptor_ = std::make_unique<tcp::acceptor>(loops_[0]->io);
  acceptor_->open(tcp::v4(), ec);
  if (!ec) acceptor_->set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) acceptor_->bind(tcp::endpoint(asio::ip::make_address_v4("127.0.0.1"), 0), ec);
  if (!ec) acceptor_->listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return Error(ErrorCode::kIo, "proxy listen: " + ec.message());
  uint16_t port = acceptor_->local_endpoint().port();
  asio::co_spawn(
      loops_[0]->io,
      [this]() -> awaitable<void> {
        for (;;) {
          auto [ec2, s] = co_await acceptor_->async_accept(kTok);
          if (ec2) {
            if (ec2 == asio::error::operation_aborted || stopped_) co_return;
            continue;
          }
          s.set_option(tcp::no_delay(true), ec2);
          Serve(s.release(ec2), false);
        }
      },
      asio::detached);
  return port;
}

void Proxy::Impl::Stop() {
  if (stopped_.exchange(true)) return;
  if (acceptor_) {
    asio::post(loops_[0]->io, [this] {
      error_code ec;
      acceptor_->close(ec);
    });
  }
  for (auto& l : loops_) {
    l->work.reset();
    l->io.stop();
  }
  for (auto& t : threads_) {
    if (t.joinable()) t.join();
  }
}

// ---------------------------------------------------------------------------------------------
// Upstream connections

awaitable<Result<TcpSocket>> Proxy::Impl::ConnectTcp(const Authority& a) {
  auto ex = co_await asio::this_coro::executor;
  TcpSocket sock(ex);
  std::string key = a.HostPort();
  auto it = config_.resolve.find(key);
  asio::ip::tcp::resolver::results_type endpoints;
  if (it != config_.resolve.end()) {
    auto mapped = ParseAuthority(it->second, 0);
    error_code ec;
    auto addr = mapped.ok() ? asio::ip::make_address(mapped->host, ec) : asio::ip::address();
    if (!mapped.ok() || ec) {
      co_return Error(ErrorCode::kInvalidArgument, "bad resolve override for " + key);
    }
    auto [cec] = co_await sock.async_connect({addr, mapped->port}, kTok);
    if (cec) co_return Error(ErrorCode::kUnavailable, "connect " + key + ": " + cec.message());
  } else {
    if (config_.resolve_only) {
      co_return Error(ErrorCode::kUnavailable, key + " is not in the resolve overrides");
    }
    asio::ip::tcp::resolver resolver(ex);
    auto [rec, results] = co_await resolver.async_resolve(a.host, std::to_string(a.port), kTok);
    if (rec) co_return Error(ErrorCode::kUnavailable, "resolve " + a.host + ": " + rec.message());
    // SECURITY: a guest-chosen name must not lead to the host's own services or link-local
    // metadata endpoints.
    std::vector<asio::ip::tcp::endpoint> allowed;
    for (const auto& entry : results) {
      if (!ForbiddenUpstream(entry.endpoint().address(), config_.egress_policy, a.host, a.port)) {
        allowed.push_back(entry.endpoint());
      }
    }
    if (allowed.empty()) {
      co_return Error(ErrorCode::kPermissionDenied,
                      a.host + " resolves to a loopback, link-local, cloud metadata, host-interface "
                      "or private address only (docs/threat-model.md: upstream addresses)",
                      "a private host must be named in the egress policy: cloister egress NAME "
                      "--allow HOST --allow-all");
    }
    auto [cec, ep] = co_await asio::async_connect(sock, allowed, kTok);
    if (cec) co_return Error(ErrorCode::kUnavailable, "connect " + key + ": " + cec.message());
  }
  error_code ec;
  sock.set_option(asio::ip::tcp::no_delay(true), ec);
  co_return std::move(sock);
}

awaitable<Result<std::unique_ptr<TcpSocket>>> Proxy::Impl::OpenUpstream(const Authority& a,
                                                                        TcpSocket*) {
  auto sock = co_await ConnectTcp(a);
  if (!sock.ok()) co_return sock.error();
  co_return std::make_unique<TcpSocket>(std::move(sock).value());
}

awaitable<Result<std::unique_ptr<TlsStream>>> Proxy::Impl::OpenUpstream(const Authority& a,
                                                                        TlsStream*) {
  auto sock = co_await ConnectTcp(a);
  if (!sock.ok()) co_return sock.error();
  auto tls = std::make_unique<TlsStream>(std::move(sock).value(), client_ctx_);
  SSL* s = tls->native_handle();
  bool ip = a.host.find_first_not_of("0123456789.") == std::string::npos ||
            a.host.find(':') != std::string::npos;
  if (ip) {
    X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(s), a.host.c_str());
  } else {
    SSL_set_tlsext_host_name(s, a.host.c_str());
    SSL_set1_host(s, a.host.c_str());
  }
  auto [ec] = co_await tls->async_handshake(ssl::stream_base::client, kTok);
  if (ec) {
    long vr = SSL_get_verify_result(s);
    std::string why = vr != X509_V_OK ? std::string("certificate verification failed: ") +
                                            X509_verify_cert_error_string(vr)
                                      : ec.message();
    co_return Error(ErrorCode::kUnavailable, "TLS to " + a.HostPort() + ": " + why);
  }
  co_return tls;
}

// ---------------------------------------------------------------------------------------------
// Detection

bool Proxy::Impl::IsLlmHost(const std::string& host) const {
  for (vault::CredentialKind k : {vault::CredentialKind::kAnthropic, vault::CredentialKind::kOpenai}) {
    if (vault::HostInAnyScope(host, vault::InfoFor(k).default_hosts)) return true;
  }
  for (const auto& b : config_.credentials) {
    if (vault::InfoFor(b.credential.kind).llm_provider &&
        vault::HostInAnyScope(host, b.credential.hosts)) {
      return true;
    }
  }
  return false;
}

void Proxy::Impl::ClassifyHits(const std::vector<Hit>& hits, const std::string& where,
                               Request& r, bool body) {
  for (const Hit& h : hits) {
    const vault::Credential& c = config_.credentials[h.index].credential;
    bool in_scope = std::find(r.in_scope.begin(), r.in_scope.end(), h.index) != r.in_scope.end();
    if (in_scope) continue;  // its own host: substituted (headers) or harmless
    LeakFlag flag{c.id, where, EncodingName(h.encoding), "blocked"};
    bool llm = body && config_.llm_body_policy == vault::LlmBodyPolicy::kFlag &&
               std::all_of(r.hosts.begin(), r.hosts.end(),
                           [&](const std::string& host) { return IsLlmHost(host); });
    if (llm) {
      flag.action = "flagged";
      bool dup = false;
      for (const LeakFlag& l : r.rec.leaks) {
        dup |= l.credential == flag.credential && l.where == flag.where &&
               l.encoding == flag.encoding;
      }
      if (!dup) r.rec.leaks.push_back(flag);
      continue;
    }
    r.block.push_back(flag);
  }
}

void Proxy::Impl::Trip(const Request& r) {
  bool first = !tripped_.exchange(true);
  if (!config_.on_compromise) return;
  for (const LeakFlag& l : r.block) {
    config_.on_compromise({config_.workspace, l.credential, r.target.host, l.where, l.encoding});
  }
  (void)first;
}

// ---------------------------------------------------------------------------------------------
// Client side

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

awaitable<void> Proxy::Impl::Session(GenericSocket sock) {
  beast::flat_buffer cbuf;
  cbuf.reserve(kIoBuffer);  // read size = capacity (see UpstreamSlot)
  Origin plain;
  UpstreamSlot<TcpSocket> up;
  // Requests are read here so a CONNECT can take the socket over.
  for (;;) {
    http::request_parser<http::buffer_body> parser;
    parser.header_limit(kMaxHeaderBytes);
    parser.body_limit(boost::none);
    auto [ec, n] = co_await http::async_read_header(sock, cbuf, parser, kTok);
    TraceRecord rec;
    rec.time_ms = NowMs();
    if (ec) {
      if (ec != http::error::end_of_stream && ec != asio::error::eof &&
          ec != asio::error::connection_reset && ec != asio::error::operation_aborted) {
        co_await WriteError(sock, 400, "malformed request: " + ec.message(), rec);
      }
      co_return;
    }
    auto& req = parser.get();
    rec.method = std::string(req.method_string());
    rec.path = TracePath(std::string_view(req.target().data(), req.target().size()));
    if (Status st = ValidateRequestHead(req); !st.ok()) {
      co_await WriteError(sock, 400, st.error().message(), rec);
      co_return;
    }
    if (req.method() == http::verb::connect) {
      auto target = ParseTarget("CONNECT", std::string_view(req.target().data(), req.target().size()));
      if (!target.ok() || !parser.is_done()) {
        co_await WriteError(sock, 400, "CONNECT with a body", rec);
        co_return;
      }
      co_await HandleConnect(std::move(sock), cbuf, target->authority);
      co_return;
    }
    // Plain HTTP proxying.
    bool keep = co_await Forward(sock, cbuf, parser, plain, up);
    if (!keep) co_return;
  }
}

awaitable<void> Proxy::Impl::HandleConnect(GenericSocket sock, beast::flat_buffer& cbuf,
                                           Authority authority) {
  TraceRecord rec;
  rec.time_ms = NowMs();
  rec.method = "CONNECT";
  rec.host = authority.host;
  rec.port = authority.port;
  static const std::string kOk = "HTTP/1.1 200 Connection established\r\n\r\n";
  if (!Allowed(authority)) {
    co_await WriteError(sock, 403, "egress policy: " + authority.HostPort() + " is not allowed", rec);
    co_return;
  }
  if (std::find(config_.tunnel_ports.begin(), config_.tunnel_ports.end(), authority.port) !=
      config_.tunnel_ports.end()) {
    // An opaque tunnel (SSH): only toward allowed hosts; connect first so a refusal is an HTTP
    // status the client can report.
    if (!vault::HostInAnyScope(authority.host, config_.tunnel_hosts)) {
      co_await WriteError(sock, 403, "tunnel to " + authority.HostPort() + " is not allowed", rec);
      co_return;
    }
    auto upstream = co_await ConnectTcp(authority);
    if (!upstream.ok()) {
      co_await WriteError(sock, 502, upstream.error().message(), rec);
      co_return;
    }
    auto [wec, wn] = co_await asio::async_write(sock, asio::buffer(kOk), kTok);
    if (wec) co_return;
    co_await Splice(sock, cbuf, authority, std::move(upstream).value(), rec);
    co_return;
  }
  auto [wec, wn] = co_await asio::async_write(sock, asio::buffer(kOk), kTok);
  if (wec) co_return;
  // SECURITY: only TLS goes through a tunnel (opaque bytes would bypass the detector), unless the
  // egress policy names this host:port explicitly (an opaque tunnel, never on 80/443).
  if (cbuf.size() == 0) {
    auto [rec2, rn] = co_await sock.async_read_some(cbuf.prepare(kIoBuffer), kTok);
    if (rec2) co_return;
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
  Origin origin;
  origin.tls = true;
  origin.connect = authority;
  co_await InterceptTls(std::move(sock), cbuf, origin, rec);
}

awaitable<void> Proxy::Impl::InterceptTls(GenericSocket sock, beast::flat_buffer& cbuf,
                                          Origin origin, TraceRecord rec) {
  ssl::stream<GenericSocket> tls(std::move(sock), server_ctx_);
  std::string connect_host = origin.connect.host;
  SSL_set_ex_data(tls.native_handle(), ConnectHostIndex(), &connect_host);
  auto [hec, used] = co_await tls.async_handshake(ssl::stream_base::server, cbuf.data(), kTok);
  SSL_set_ex_data(tls.native_handle(), ConnectHostIndex(), nullptr);
  if (hec) {
    rec.status = 400;
    rec.error = "TLS handshake with the client failed";
    Record(rec);
    co_return;
  }
  cbuf.consume(used);
  const char* sni = SSL_get_servername(tls.native_handle(), TLSEXT_NAMETYPE_host_name);
  if (ValidSni(sni)) origin.sni = ToLower(sni);
  if (!origin.sni.empty() && origin.sni.back() == '.') origin.sni.pop_back();
  if (origin.transparent && !origin.sni.empty() && origin.sni != origin.connect.host) {
    // SECURITY: the guest resolved one name and names another in TLS: refuse rather than guess
    // which one the request is for.
    rec.status = 421;
    rec.error = "TLS SNI " + origin.sni + " does not match the connection's name " +
                origin.connect.host;
    Record(rec);
    error_code ec;
    tls.next_layer().shutdown(asio::socket_base::shutdown_both, ec);
    co_return;
  }
  co_await HttpLoop<TlsStream>(tls, cbuf, origin);
  error_code ec;
  tls.next_layer().shutdown(asio::socket_base::shutdown_both, ec);
}

awaitable<void> Proxy::Impl::Splice(GenericSocket& sock, beast::flat_buffer& cbuf,
                                    const Authority& to, std::optional<TcpSocket> connected,
                                    TraceRecord rec) {
  if (!connected) {
    auto up = co_await ConnectTcp(to);
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

awaitable<void> Proxy::Impl::TransparentSession(GenericSocket sock) {
  TraceRecord rec;
  rec.time_ms = NowMs();
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
  if (verdict == 1) {
    origin.tls = true;
    co_await InterceptTls(std::move(sock), cbuf, origin, rec);
    co_return;
  }
  if (verdict == 2) {
    co_await HttpLoop<TcpSocket>(sock, cbuf, origin);
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

// Relays one request and its response. Returns whether the client connection may be reused.
template <class Client, class Up>
awaitable<bool> Proxy::Impl::Forward(Client& client, beast::flat_buffer& cbuf,
                                     http::request_parser<http::buffer_body>& parser,
                                     const Origin& origin, UpstreamSlot<Up>& up) {
  auto& req = parser.get();
  Request r;
  r.start = std::chrono::steady_clock::now();
  r.rec.time_ms = NowMs();
  r.rec.method = std::string(req.method_string());
  if (origin.transparent) r.rec.mode = "transparent";
  std::string_view raw_target(req.target().data(), req.target().size());
  r.rec.path = TracePath(raw_target);

  // Where does it go?
  auto target = ParseTarget(r.rec.method, raw_target);
  if (!target.ok()) {
    co_await WriteError(client, 400, target.error().message(), r.rec);
    co_return false;
  }
  if (origin.tls) {
    if (target->form == RequestTarget::Form::kAbsolute &&
        (target->authority.host != origin.connect.host || target->scheme != "https")) {
      co_await WriteError(client, 400, "request target does not match the tunnel", r.rec);
      co_return false;
    }
    if (target->form == RequestTarget::Form::kAsterisk) target->path = "*";
    r.target = origin.connect;
  } else if (origin.transparent) {
    // Plain HTTP redirected in the guest: it goes to the header's host:port, whatever it names.
    if (target->form == RequestTarget::Form::kAbsolute &&
        (target->authority.host != origin.connect.host || target->scheme != "http")) {
      co_await WriteError(client, 400, "request target does not match the connection", r.rec);
      co_return false;
    }
    if (target->form == RequestTarget::Form::kAsterisk) target->path = "*";
    r.target = origin.connect;
  } else {
    if (target->form != RequestTarget::Form::kAbsolute || target->scheme != "http") {
      co_await WriteError(client, 400,
                          "not a proxy request (use http://host/ targets, or CONNECT for https)",
                          r.rec);
      co_return false;
    }
    r.target = target->authority;
    r.rec.host = r.target.host;
    r.rec.port = r.target.port;
    if (!Allowed(r.target)) {
      co_await WriteError(client, 403, "egress policy: " + r.target.HostPort() + " is not allowed",
                          r.rec);
      co_return false;
    }
  }
  r.rec.host = r.target.host;
  r.rec.port = r.target.port;
  r.rec.path = TracePath(target->path);
  std::string host_header;
  if (auto h = req.find(http::field::host); h != req.end()) {
    auto a = ParseAuthority(std::string_view(h->value().data(), h->value().size()), r.target.port);
    if (a.ok()) host_header = a->host;
  } else {
    host_header = r.target.host;  // HTTP/1.0 without Host: the target names the host
  }
  r.hosts = {r.target.host};
  if (!host_header.empty() && host_header != r.target.host) r.hosts.push_back(host_header);
  if (origin.tls && !origin.sni.empty() && origin.sni != r.target.host) r.hosts.push_back(origin.sni);
  r.names_agree = origin.tls && host_header == r.target.host && origin.sni == r.target.host;
  if (origin.transparent && host_header != r.target.host) {
    // SECURITY: the guest resolved one name and asks another: refuse rather than guess.
    co_await WriteError(client, 421,
                        "Host " + host_header + " does not match the connection's name " +
                            r.target.host,
                        r.rec);
    co_return false;
  }
  for (size_t i = 0; i < config_.credentials.size(); ++i) {
    const auto& hosts = config_.credentials[i].credential.hosts;
    if (std::all_of(r.hosts.begin(), r.hosts.end(),
                    [&](const std::string& h) { return vault::HostInAnyScope(h, hosts); })) {
      r.in_scope.push_back(i);
    }
  }

  if (tripped_) {
    co_await WriteError(client, 451, "workspace is compromised; nothing is forwarded", r.rec);
    co_return false;
  }

  // Scan the head: target and every header value.
  ClassifyHits(placeholders_->Scan(raw_target), "url", r, false);
  for (const auto& f : req) {
    std::string_view v(f.value().data(), f.value().size());
    ClassifyHits(placeholders_->Scan(v), "header:" + ToLower(f.name_string()), r, false);
  }
  auto block = [&]() -> awaitable<bool> {
    r.rec.blocked = true;
    for (const LeakFlag& l : r.block) r.rec.leaks.push_back(l);
    Trip(r);
    r.rec.latency_ms = std::chrono::duration<double, std::milli>(
                           std::chrono::steady_clock::now() - r.start).count();
    co_await WriteError(client, 451, "a credential placeholder was sent to a host it does not "
                                     "belong to; the workspace is marked compromised",
                        r.rec);
    co_return false;
  };
  if (!r.block.empty()) co_return co_await block();

  // Substitute in headers (TLS only, names agree, credential's own headers).
  std::vector<size_t> body_subst;
  Redactor redactor;
  if (origin.tls && r.names_agree) {
    for (size_t i : r.in_scope) {
      const vault::Credential& c = config_.credentials[i].credential;
      const std::string& ph = config_.credentials[i].placeholder;
      std::vector<std::string> names = c.kind == vault::CredentialKind::kHeader
                                           ? std::vector<std::string>{c.header}
                                           : vault::InfoFor(c.kind).headers;
      bool swapped = false;
      for (const std::string& name : names) {
        std::vector<std::string> values;
        bool changed = false;
        auto range = req.equal_range(name);
        for (auto it = range.first; it != range.second; ++it) {
          std::string_view v(it->value().data(), it->value().size());
          auto s = SubstituteInHeader(v, ph, c.value);
          changed |= s.has_value();
          values.push_back(s ? std::move(*s) : std::string(v));
        }
        if (!changed) continue;
        req.erase(name);
        for (std::string& v : values) {
          req.insert(name, v);
          vault::SecureWipe(v);
        }
        swapped = true;
      }
      if (c.body_substitution) body_subst.push_back(i);
      if (swapped || c.body_substitution) redactor.Add(c.value, ph);
      if (swapped) r.rec.swaps.push_back(c.id);
    }
  }

  // Hop-by-hop headers; upgrades pass through.
  bool upgrade = req.find(http::field::upgrade) != req.end();
  std::vector<std::string> drop;
  for (const auto& f : req) {
    if (IsHopByHop(f.name_string())) drop.push_back(std::string(f.name_string()));
  }
  for (const auto& d : drop) req.erase(d);
  bool client_keep_alive = req.keep_alive();
  if (upgrade) {
    req.set(http::field::connection, "upgrade");
  } else {
    req.erase(http::field::connection);
  }
  bool expect_continue = false;
  if (auto e = req.find(http::field::expect); e != req.end()) {
    expect_continue = beast::iequals(e->value(), "100-continue");
    if (expect_continue) req.erase(http::field::expect);
  }
  req.target(target->path);
  req.version(11);
  if (expect_continue && !parser.is_done()) {
    static const std::string k100 = "HTTP/1.1 100 Continue\r\n\r\n";
    auto [ec, n] = co_await asio::async_write(client, asio::buffer(k100), kTok);
    (void)ec;
    (void)n;
  }

  // Filters (aws re-signing) on intercepted requests whose names agree.
  std::vector<std::unique_ptr<BodyTransform>> transforms;
  std::vector<RequestFilter*> full_body;
  size_t hold_limit = config_.body_hold_bytes;
  RequestHead head;
  if (origin.tls && r.names_agree && !config_.filters.empty()) {
    head = HeadFrom(req, r.target);
    bool changed = false;
    for (const auto& f : config_.filters) {
      auto v = f->OnRequestHead(head);
      if (!v.ok()) {
        if (v.error().code() == ErrorCode::kCompromised) {
          r.block.push_back({"filter", "request", "-", "blocked"});
          r.rec.error = v.error().message();
          co_return co_await block();
        }
        co_await WriteError(client, 403, v.error().message(), r.rec);
        co_return false;
      }
      if (!v->handled) continue;
      changed = true;
      if (v->need_full_body) {
        full_body.push_back(f.get());
        hold_limit = std::max(hold_limit, v->max_body);
      }
      if (v->body) transforms.push_back(std::move(v->body));
    }
    if (changed) ApplyHead(head, req);
  }
  // Runs the body transforms over `data` (and their End() when `last`); false on error.
  auto transform = [&](std::string& data, bool last) -> bool {
    for (auto& t : transforms) {
      auto out = t->Data(data);
      if (!out.ok()) return false;
      data = std::move(out).value();
      if (last) {
        auto end = t->End();
        if (!end.ok()) return false;
        data += *end;
      }
    }
    return true;
  };

  // Body: hold up to body_hold_bytes and scan before anything goes upstream.
  bool had_body = parser.chunked() || (parser.content_length() && *parser.content_length() > 0);
  StreamScanner scanner(*placeholders_);
  std::string pending;
  std::vector<char> io(kIoBuffer);
  auto read_piece = [&]() -> awaitable<Result<size_t>> {
    req.body().data = io.data();
    req.body().size = io.size();
    auto [ec, n] = co_await http::async_read_some(client, cbuf, parser, kTok);
    if (ec == http::error::need_buffer) ec = {};
    if (ec) co_return Error(ErrorCode::kInvalidArgument, "request body: " + ec.message());
    co_return io.size() - req.body().size;
  };
  auto scan_piece = [&](std::string_view piece) {
    std::vector<Hit> hits;
    scanner.Feed(piece, hits);
    ClassifyHits(hits, "body", r, true);
  };
  while (!parser.is_done() && pending.size() < hold_limit) {
    auto got = co_await read_piece();
    if (!got.ok()) {
      co_await WriteError(client, 400, got.error().message(), r.rec);
      co_return false;
    }
    std::string_view piece(io.data(), *got);
    scan_piece(piece);
    pending.append(piece);
    if (!r.block.empty()) co_return co_await block();
  }
  auto swap_body = [&](std::string& data) {
    for (size_t i : body_subst) {
      const std::string& ph = config_.credentials[i].placeholder;
      const std::string& real = config_.credentials[i].credential.value;
      bool any = false;
      for (size_t pos = data.find(ph); pos != std::string::npos; pos = data.find(ph, pos + real.size())) {
        data.replace(pos, ph.size(), real);
        any = true;
      }
      if (any && std::find(r.rec.swaps.begin(), r.rec.swaps.end(),
                           config_.credentials[i].credential.id) == r.rec.swaps.end()) {
        r.rec.swaps.push_back(config_.credentials[i].credential.id);
      }
    }
  };
  bool complete = parser.is_done();
  if (!full_body.empty()) {
    if (!complete) {
      co_await WriteError(client, 413, "request body too large for re-signing", r.rec);
      co_return false;
    }
    for (RequestFilter* f : full_body) {
      if (Status st = f->OnFullBody(head, pending); !st.ok()) {
        co_await WriteError(client, 403, st.error().message(), r.rec);
        co_return false;
      }
    }
    ApplyHead(head, req);
  }
  if (complete) {
    if (!transform(pending, true)) {
      co_await WriteError(client, 403, "request body refused by a filter", r.rec);
      co_return false;
    }
    swap_body(pending);
    if (had_body) {
      req.erase(http::field::transfer_encoding);
      req.set(http::field::content_length, std::to_string(pending.size()));
    }
  } else {
    // Streaming: equal-length swaps only, so the declared length stays right.
    std::erase_if(body_subst, [&](size_t i) {
      return config_.credentials[i].placeholder.size() != config_.credentials[i].credential.value.size();
    });
  }
  r.rec.bytes_up = pending.size();

  // Connect (or reuse) upstream.
  std::string key = r.target.HostPort();
  if (!up.stream || up.key != key) {
    up.Reset();
    auto conn = co_await OpenUpstream(r.target, static_cast<Up*>(nullptr));
    if (!conn.ok()) {
      co_await WriteError(client, 502, conn.error().message(), r.rec);
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
    const size_t hold = 256;  // longer than every base64 form of a placeholder
    std::string held = std::move(pending);
    if (!transform(held, false)) {
      co_await WriteError(client, 403, "request body refused by a filter", r.rec);
      co_return false;
    }
    swap_body(held);
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
        co_await WriteError(client, 400, got.error().message(), r.rec);
        co_return false;
      }
      std::string_view piece(io.data(), *got);
      scan_piece(piece);
      if (!r.block.empty()) {
        up.Reset();  // SECURITY: the held bytes (with the placeholder) are never written
        co_return co_await block();
      }
      r.rec.bytes_up += piece.size();
      std::string tp(piece);
      if (!transform(tp, parser.is_done())) {
        up.Reset();
        co_await WriteError(client, 403, "request body refused by a filter", r.rec);
        co_return false;
      }
      held.append(tp);
      swap_body(held);
      up_ok = co_await flush(false);
    }
    if (up_ok) up_ok = co_await flush(true);
    vault::SecureWipe(out);
    vault::SecureWipe(held);
  }
  vault::SecureWipe(pending);
  if (!up_ok) {
    up.Reset();
    co_await WriteError(client, 502, "upstream closed while sending the request", r.rec);
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
      co_await WriteError(client, 502, "upstream response: " + ec.message(), r.rec);
      co_return false;
    }
    unsigned code = rp->get().result_int();
    if (code >= 100 && code < 200 && code != 101) continue;  // 1xx informational: dropped
    break;
  }
  auto& res = rp->get();
  r.rec.status = static_cast<int>(res.result_int());
  bool switching = res.result_int() == 101 && upgrade;
  bool upstream_keep = res.keep_alive() && !rp->need_eof();
  std::vector<std::string> rdrop;
  for (const auto& f : res) {
    if (IsHopByHop(f.name_string())) rdrop.push_back(std::string(f.name_string()));
  }
  for (const auto& d : rdrop) res.erase(d);
  if (redactor.active()) {
    std::vector<std::pair<std::string, std::string>> fixed;
    for (const auto& f : res) {
      std::string v(f.value());
      std::string red = redactor.Apply(v);
      if (red != v) fixed.push_back({std::string(f.name_string()), red});
    }
    for (const auto& [name, value] : fixed) res.set(name, value);
  }
  bool keep = client_keep_alive && upstream_keep && !switching;
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
  if (rp->is_done()) {
    client_ok = co_await write_res();
  } else {
    auto [hec, hn] = co_await http::async_write_header(client, rs, kTok);
    client_ok = !hec;
    while (client_ok && !rp->is_done()) {
      res.body().data = io.data();
      res.body().size = io.size();
      auto [ec, n] = co_await http::async_read_some(upstream, up.buf, *rp, kTok);
      if (ec == http::error::need_buffer) ec = {};
      if (ec) {
        up_ok = false;
        break;
      }
      size_t got = io.size() - res.body().size;
      r.rec.bytes_down += got;
      if (got == 0 && !rp->is_done()) continue;
      std::string redacted;
      if (redactor.active()) {
        redacted = redactor.Feed(std::string_view(io.data(), got), rp->is_done());
        res.body().data = redacted.empty() ? nullptr : redacted.data();
        res.body().size = redacted.size();
        if (redacted.empty() && !rp->is_done()) continue;
      } else {
        res.body().data = got ? io.data() : nullptr;
        res.body().size = got;
      }
      res.body().more = !rp->is_done();
      client_ok = co_await write_res();
    }
  }
  r.rec.latency_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - r.start).count();
  Record(r.rec);
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

// ---------------------------------------------------------------------------------------------

Proxy::Proxy(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Proxy::~Proxy() { Stop(); }

Result<std::unique_ptr<Proxy>> Proxy::Start(ProxyConfig config) {
  auto impl = std::make_unique<Impl>(std::move(config));
  RETURN_IF_ERROR(impl->Init());
  return std::unique_ptr<Proxy>(new Proxy(std::move(impl)));
}

void Proxy::Serve(int fd) { impl_->Serve(fd, false); }
void Proxy::ServeTransparent(int fd) { impl_->Serve(fd, true); }
Result<uint16_t> Proxy::ListenLoopback() { return impl_->ListenLoopback(); }
void Proxy::Stop() {
  if (impl_) impl_->Stop();
}
bool Proxy::compromised() const { return impl_->compromised(); }

}  // namespace cloister::proxy
