#include "proxy/proxy.h"

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

  RETURN_IF_ERROR(interceptor_.Init(config_.ca));
  RETURN_IF_ERROR(upstreams_.Init());

  int n = std::max(1, config_.threads);
  for (int i = 0; i < n; ++i) {
    loops_.push_back(std::make_unique<Loop>());
    loops_.back()->work.emplace(loops_.back()->io.get_executor());
    RETURN_IF_ERROR(upstreams_.AddLoop(loops_.back()->io));
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

void Proxy::Impl::Serve(int fd, bool transparent, std::string source, ClientEndReason why_ended) {
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
    asio::co_spawn(io, TransparentSession(std::move(sock), std::move(source), std::move(why_ended)),
                   asio::detached);
  } else {
    asio::co_spawn(io, Session(std::move(sock), std::move(source), std::move(why_ended)),
                   asio::detached);
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
void Proxy::Serve(int fd, const std::string& source, ClientEndReason why_ended) {
  impl_->Serve(fd, false, source, std::move(why_ended));
}
void Proxy::ServeTransparent(int fd, const std::string& source, ClientEndReason why_ended) {
  impl_->Serve(fd, true, source, std::move(why_ended));
}
Result<uint16_t> Proxy::ListenLoopback() { return impl_->ListenLoopback(); }
void Proxy::Stop() {
  if (impl_) impl_->Stop();
}
bool Proxy::compromised() const { return impl_->compromised(); }

}  // namespace cloister::proxy
