#include "guest/tcp_connect.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace cloister::guest {

Result<uint16_t> ParseTcpServiceArgs(const std::vector<std::string>& args) {
  if (args.size() != 1) return Error(ErrorCode::kInvalidArgument, "tcp: expected one argument, a port");
  const std::string& s = args[0];
  if (s.empty() || s.size() > 5 || s[0] == '0') {
    return Error(ErrorCode::kInvalidArgument, "tcp: bad port");
  }
  uint32_t port = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return Error(ErrorCode::kInvalidArgument, "tcp: bad port");
    port = port * 10 + static_cast<uint32_t>(c - '0');
  }
  if (port == 0 || port > 65535) return Error(ErrorCode::kInvalidArgument, "tcp: bad port");
  return static_cast<uint16_t>(port);
}

Result<int> ConnectGuestLoopback(uint16_t port) {
  std::string last;
  for (int family : {AF_INET, AF_INET6}) {
    int fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      last = std::strerror(errno);
      continue;
    }
    int rc;
    if (family == AF_INET) {
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_port = htons(port);
      a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      rc = connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
    } else {
      sockaddr_in6 a{};
      a.sin6_family = AF_INET6;
      a.sin6_port = htons(port);
      a.sin6_addr = in6addr_loopback;
      rc = connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
    }
    if (rc == 0) {
      int one = 1;
      (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      return fd;
    }
    last = std::strerror(errno);
    close(fd);
  }
  return Error(ErrorCode::kUnavailable,
               "nothing listens on the guest's port " + std::to_string(port) + " (" + last + ")");
}

void RelayBoth(int a, int b) {
  bool open_ab = true, open_ba = true;  // a->b still copying, b->a still copying
  char buf[64 * 1024];
  while (open_ab || open_ba) {
    pollfd p[2] = {{a, static_cast<short>(open_ab ? POLLIN : 0), 0},
                   {b, static_cast<short>(open_ba ? POLLIN : 0), 0}};
    if (poll(p, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    for (int i = 0; i < 2; ++i) {
      bool& open = i == 0 ? open_ab : open_ba;
      int from = i == 0 ? a : b, to = i == 0 ? b : a;
      if (!open || !(p[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      ssize_t n = read(from, buf, sizeof buf);
      if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      if (n <= 0) {
        open = false;
        (void)shutdown(to, SHUT_WR);
        if (n < 0) return;
        continue;
      }
      for (ssize_t off = 0; off < n;) {
        ssize_t w = write(to, buf + off, static_cast<size_t>(n - off));
        if (w < 0 && errno == EINTR) continue;
        if (w < 0 && errno == EAGAIN) {
          pollfd q{to, POLLOUT, 0};
          (void)poll(&q, 1, -1);
          continue;
        }
        if (w <= 0) return;  // the reader went away: end both directions
        off += w;
      }
    }
  }
}

void ServeTcpConnect(int stream, const std::vector<std::string>& args) {
  auto port = ParseTcpServiceArgs(args);
  if (port.ok()) {
    auto conn = ConnectGuestLoopback(*port);
    if (conn.ok()) {
      RelayBoth(stream, *conn);
      close(*conn);
    }
  }
  close(stream);
}

}  // namespace cloister::guest
