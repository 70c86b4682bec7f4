#include "guest/ssh_connect.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstring>

namespace cloister::guest {
namespace {

void Say(int fd, const std::string& s) {
  std::string line = "ssh-connect: " + s + "\n";
  (void)!write(fd, line.data(), line.size());
}

bool WriteAll(int fd, const char* p, size_t n) {
  while (n > 0) {
    ssize_t w = fd >= 0 ? send(fd, p, n, MSG_NOSIGNAL) : -1;
    if (w < 0 && errno == ENOTSOCK) w = write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

bool ValidHost(const std::string& h) {
  if (h.empty() || h.size() > 253) return false;
  for (unsigned char c : h) {
    if (!(std::isalnum(c) || c == '.' || c == '-' || c == ':' || c == '_')) return false;
  }
  return true;
}

bool ParsePort(const std::string& s, uint16_t* out) {
  if (s.empty() || s.size() > 5) return false;
  unsigned v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + static_cast<unsigned>(c - '0');
  }
  if (v == 0 || v > 65535) return false;
  *out = static_cast<uint16_t>(v);
  return true;
}

}  // namespace

int RunSshConnect(const std::vector<std::string>& args, int in_fd, int out_fd, int err_fd) {
  uint16_t proxy_port = kDefaultSshConnectProxyPort;
  std::vector<std::string> pos;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--proxy-port" && i + 1 < args.size()) {
      if (!ParsePort(args[++i], &proxy_port)) {
        Say(err_fd, "bad --proxy-port");
        return 2;
      }
    } else {
      pos.push_back(args[i]);
    }
  }
  uint16_t port = 0;
  if (pos.size() != 2 || !ValidHost(pos[0]) || !ParsePort(pos[1], &port)) {
    Say(err_fd, "usage: cloister-agent ssh-connect [--proxy-port N] HOST PORT");
    return 2;
  }
  const std::string& host = pos[0];
  std::string target = (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" +
                       std::to_string(port);

  int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(proxy_port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (s < 0 || connect(s, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    Say(err_fd, "cannot reach the egress proxy on 127.0.0.1:" + std::to_string(proxy_port) + ": " +
                    std::strerror(errno));
    if (s >= 0) close(s);
    return 1;
  }
  std::string req = "CONNECT " + target + " HTTP/1.1\r\nHost: " + target + "\r\n\r\n";
  if (!WriteAll(s, req.data(), req.size())) {
    Say(err_fd, "the egress proxy closed the connection");
    close(s);
    return 1;
  }
  // The proxy's answer head, read byte by byte so no tunnel byte is consumed (bounded).
  std::string head;
  while (head.find("\r\n\r\n") == std::string::npos) {
    char c;
    ssize_t n = read(s, &c, 1);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0 || head.size() > 16384) {
      Say(err_fd, "the egress proxy closed the connection");
      close(s);
      return 1;
    }
    head.push_back(c);
  }
  std::string status = head.substr(0, head.find("\r\n"));
  if (status.size() < 12 || status.compare(9, 3, "200") != 0) {
    // The reason, if the proxy sent one, is the body's first line.
    std::string body;
    char buf[512];
    ssize_t n = read(s, buf, sizeof buf);
    if (n > 0) body.assign(buf, static_cast<size_t>(n));
    body = body.substr(0, body.find('\n'));
    for (char& c : body) if (static_cast<unsigned char>(c) < 0x20) c = ' ';
    for (char& c : status) if (static_cast<unsigned char>(c) < 0x20) c = ' ';
    Say(err_fd, "proxy refused " + target + ": " + status + (body.empty() ? "" : " (" + body + ")"));
    if (status.find(" 403") != std::string::npos) {
      Say(err_fd, "ssh may reach only the workspace's SSH hosts and ports; on the host: "
                  "`cloister ssh-policy NAME --add-host HOST` (or --ports), then `cloister reboot NAME`");
    }
    close(s);
    return 1;
  }

  // Splice until both directions are done.
  bool in_open = true, up_open = true;
  std::vector<char> buf(64 * 1024);
  while (in_open || up_open) {
    pollfd p[2];
    int np = 0;
    int idx_in = -1, idx_up = -1;
    if (in_open) { idx_in = np; p[np++] = {in_fd, POLLIN, 0}; }
    if (up_open) { idx_up = np; p[np++] = {s, POLLIN, 0}; }
    if (poll(p, static_cast<nfds_t>(np), -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (idx_in >= 0 && p[idx_in].revents) {
      ssize_t n = read(in_fd, buf.data(), buf.size());
      if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      if (n <= 0) {
        in_open = false;
        shutdown(s, SHUT_WR);
      } else if (!WriteAll(s, buf.data(), static_cast<size_t>(n))) {
        break;
      }
    }
    if (idx_up >= 0 && p[idx_up].revents) {
      ssize_t n = read(s, buf.data(), buf.size());
      if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      if (n <= 0) {
        up_open = false;
        close(out_fd);
        // ssh has what the server sent; nothing more can come back, so stop.
        break;
      }
      if (!WriteAll(out_fd, buf.data(), static_cast<size_t>(n))) break;
    }
  }
  close(s);
  return 0;
}

}  // namespace cloister::guest
