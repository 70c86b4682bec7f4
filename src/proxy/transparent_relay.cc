#include "proxy/transparent_relay.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>

namespace cloister::proxy::testing {

Result<std::unique_ptr<TransparentRelay>> TransparentRelay::Start(Proxy* proxy, std::string header,
                                                                 bool transparent) {
  std::unique_ptr<TransparentRelay> r(new TransparentRelay());
  r->proxy_ = proxy;
  r->header_ = std::move(header);
  r->transparent_ = transparent;
  if (pipe2(r->stop_pipe_, O_CLOEXEC) != 0) return ErrnoError("pipe", errno);
  r->listen_fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (r->listen_fd_ < 0) return ErrnoError("socket", errno);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  if (bind(r->listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      listen(r->listen_fd_, 128) != 0 ||
      getsockname(r->listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    return ErrnoError("relay listen", errno);
  }
  r->port_ = ntohs(addr.sin_port);
  r->acceptor_ = std::thread([p = r.get()] { p->AcceptLoop(); });
  return r;
}

TransparentRelay::~TransparentRelay() {
  if (stop_pipe_[1] >= 0) (void)!write(stop_pipe_[1], "x", 1);
  if (acceptor_.joinable()) acceptor_.join();
  std::vector<std::thread> threads;
  {
    std::lock_guard<std::mutex> l(mu_);
    threads.swap(threads_);
  }
  for (auto& t : threads) t.join();
  if (listen_fd_ >= 0) close(listen_fd_);
  for (int fd : stop_pipe_) {
    if (fd >= 0) close(fd);
  }
}

void TransparentRelay::AcceptLoop() {
  for (;;) {
    pollfd p[2] = {{listen_fd_, POLLIN, 0}, {stop_pipe_[0], POLLIN, 0}};
    if (poll(p, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (p[1].revents) return;
    int c = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (c < 0) continue;
    int one = 1;
    setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    int sp[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp) != 0) {
      close(c);
      continue;
    }
    if (transparent_) {
      proxy_->ServeTransparent(sp[1]);
    } else {
      proxy_->Serve(sp[1]);
    }
    std::lock_guard<std::mutex> l(mu_);
    threads_.emplace_back([this, c, s = sp[0]] { Pump(c, s); });
  }
}

void TransparentRelay::Pump(int client, int stream) {
  bool ok = true;
  for (size_t off = 0; ok && off < header_.size();) {
    ssize_t n = send(stream, header_.data() + off, header_.size() - off, MSG_NOSIGNAL);
    if (n <= 0) ok = false;
    else off += static_cast<size_t>(n);
  }
  bool up_open = ok, down_open = ok;  // client -> stream, stream -> client
  char buf[64 * 1024];
  while (up_open || down_open) {
    pollfd p[3] = {{client, static_cast<short>(up_open ? POLLIN : 0), 0},
                   {stream, static_cast<short>(down_open ? POLLIN : 0), 0},
                   {stop_pipe_[0], POLLIN, 0}};
    if (poll(p, 3, -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (p[2].revents) break;
    auto move = [&](int from, int to, bool& open) {
      ssize_t n = read(from, buf, sizeof buf);
      if (n <= 0) {
        open = false;
        shutdown(to, SHUT_WR);
        return;
      }
      for (ssize_t off = 0; off < n;) {
        ssize_t w = send(to, buf + off, static_cast<size_t>(n - off), MSG_NOSIGNAL);
        if (w <= 0) {
          open = false;
          shutdown(from, SHUT_RD);
          return;
        }
        off += w;
      }
    };
    if (up_open && (p[0].revents & (POLLIN | POLLHUP | POLLERR))) move(client, stream, up_open);
    if (down_open && (p[1].revents & (POLLIN | POLLHUP | POLLERR))) move(stream, client, down_open);
  }
  close(client);
  close(stream);
}

}  // namespace cloister::proxy::testing
