#include "proxy/proxy.h"

#include <openssl/ssl.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>

#include "proxy/proxy_impl.h"

namespace cloister::proxy {

// ---------------------------------------------------------------------------------------------
// Setup

Status Proxy::Impl::Init() {
  if (!config_.ca) return Error(ErrorCode::kInvalidArgument, "proxy: no CA");
  std::vector<std::string> phs;
  for (const auto& b : config_.credentials) phs.push_back(b.placeholder);
  placeholders_ = std::make_unique<PlaceholderSet>(phs);
  ctx_.config = &config_;
  ctx_.placeholders = placeholders_.get();
  ctx_.tripped = &tripped_;
  // SECURITY: a streamed body keeps back the longest span a placeholder can take on the wire in
  // any encoding the detector knows, so no byte of one leaves before the detector saw all of it.
  ctx_.stream_hold_bytes = std::max<size_t>(256, placeholders_->MaxWireLength());

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
  for (int i = 0; i < n; ++i) {
    threads_.emplace_back([this, i] {
      // Named so top -H and perf tell the proxy's loops from the rest of the process.
      pthread_setname_np(pthread_self(), ("cloister-px" + std::to_string(i)).c_str());
      loops_[i]->io.run();
    });
  }
  return OkStatus();
}

void Proxy::Impl::Serve(int fd, bool transparent, std::string source) {
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
    asio::co_spawn(io, TransparentSession(std::move(sock), std::move(source)), asio::detached);
  } else {
    asio::co_spawn(io, Session(std::move(sock), std::move(source)), asio::detached);
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

void Proxy::Impl::Trip(const Exchange& ex) {
  tripped_.store(true);
  if (!config_.on_compromise) return;
  for (const LeakFlag& l : ex.block) {
    config_.on_compromise({config_.workspace, l.credential, ex.target.host, l.where, l.encoding});
  }
}

// ---------------------------------------------------------------------------------------------
// Proxy mode: requests are read here so a CONNECT can take the socket over (tunnel.cc).

awaitable<void> Proxy::Impl::Session(GenericSocket sock, std::string source) {
  beast::flat_buffer cbuf;
  cbuf.reserve(kIoBuffer);  // read size = capacity (see UpstreamSlot)
  Origin plain;
  plain.source = source;
  UpstreamSlot<TcpSocket> up;
  // Requests are read here so a CONNECT can take the socket over.
  for (;;) {
    http::request_parser<http::buffer_body> parser;
    parser.header_limit(kMaxHeaderBytes);
    parser.body_limit(boost::none);
    auto [ec, n] = co_await http::async_read_header(sock, cbuf, parser, kTok);
    TraceRecord rec;
    rec.time_ms = NowMs();
    rec.source = source;
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
      co_await HandleConnect(std::move(sock), cbuf, target->authority, source);
      co_return;
    }
    // Plain HTTP proxying.
    bool keep = co_await Forward(sock, cbuf, parser, plain, up);
    if (!keep) co_return;
  }
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
void Proxy::Serve(int fd, const std::string& source) { impl_->Serve(fd, false, source); }
void Proxy::ServeTransparent(int fd, const std::string& source) {
  impl_->Serve(fd, true, source);
}
Result<uint16_t> Proxy::ListenLoopback() { return impl_->ListenLoopback(); }
void Proxy::Stop() {
  if (impl_) impl_->Stop();
}
bool Proxy::compromised() const { return impl_->compromised(); }

}  // namespace cloister::proxy
