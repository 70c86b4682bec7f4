// `cloister-agent ssh-connect` against a fake proxy on 127.0.0.1: the CONNECT line, the splice in
// both directions with half-close, and a refusal reported with the proxy's reason and the hint.
#include "guest/ssh_connect.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <future>
#include <string>

#include <gtest/gtest.h>

namespace cloister::guest {
namespace {

struct FakeProxy {
  int listen_fd = -1;
  uint16_t port = 0;
  FakeProxy() {
    listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(bind(listen_fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    EXPECT_EQ(listen(listen_fd, 1), 0);
    socklen_t len = sizeof a;
    getsockname(listen_fd, reinterpret_cast<sockaddr*>(&a), &len);
    port = ntohs(a.sin_port);
  }
  ~FakeProxy() { close(listen_fd); }
};

std::string ReadAll(int fd) {
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = read(fd, buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
  return out;
}

// Reads until the CONNECT head's blank line.
std::string ReadHead(int fd) {
  std::string head;
  char c;
  while (head.find("\r\n\r\n") == std::string::npos && read(fd, &c, 1) == 1) head.push_back(c);
  return head;
}

TEST(SshConnectTest, TunnelsBothWaysAfterA200) {
  FakeProxy proxy;
  auto server = std::async(std::launch::async, [&] {
    int c = accept(proxy.listen_fd, nullptr, nullptr);
    std::string head = ReadHead(c);
    std::string reply = "HTTP/1.1 200 Connection established\r\n\r\nSSH-2.0-fake\r\n";
    (void)!write(c, reply.data(), reply.size());
    std::string from_client = ReadAll(c);  // until the client half-closes
    std::string back = "echo:" + from_client;
    (void)!write(c, back.data(), back.size());
    close(c);
    return head + "|" + from_client;
  });
  int in[2], out[2], err[2];
  ASSERT_EQ(pipe(in), 0);
  ASSERT_EQ(pipe(out), 0);
  ASSERT_EQ(pipe(err), 0);
  std::string msg = "SSH-2.0-client\r\nhello";
  ASSERT_EQ(write(in[1], msg.data(), msg.size()), static_cast<ssize_t>(msg.size()));
  close(in[1]);  // ssh is done sending
  int rc = RunSshConnect({"--proxy-port", std::to_string(proxy.port), "git.example.test", "22"},
                         in[0], out[1], err[1]);
  close(err[1]);
  EXPECT_EQ(rc, 0) << ReadAll(err[0]);
  std::string got = ReadAll(out[0]);
  EXPECT_EQ(got, "SSH-2.0-fake\r\necho:" + msg);
  std::string seen = server.get();
  EXPECT_EQ(seen.substr(0, seen.find('|')),
            "CONNECT git.example.test:22 HTTP/1.1\r\nHost: git.example.test:22\r\n\r\n");
  EXPECT_EQ(seen.substr(seen.find('|') + 1), msg);
  for (int fd : {in[0], out[0], err[0]}) close(fd);
}

TEST(SshConnectTest, ARefusalNamesTheReasonAndThePolicy) {
  FakeProxy proxy;
  auto server = std::async(std::launch::async, [&] {
    int c = accept(proxy.listen_fd, nullptr, nullptr);
    ReadHead(c);
    std::string reply =
        "HTTP/1.1 403 Forbidden\r\nContent-Length: 41\r\n\r\ntunnel to evil.example:22 is not allowed\n";
    (void)!write(c, reply.data(), reply.size());
    close(c);
  });
  int out[2], err[2];
  ASSERT_EQ(pipe(out), 0);
  ASSERT_EQ(pipe(err), 0);
  int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
  int rc = RunSshConnect({"--proxy-port", std::to_string(proxy.port), "evil.example", "22"}, devnull,
                         out[1], err[1]);
  server.get();
  close(err[1]);
  close(out[1]);
  EXPECT_EQ(rc, 1);
  std::string e = ReadAll(err[0]);
  EXPECT_NE(e.find("proxy refused evil.example:22: HTTP/1.1 403 Forbidden (tunnel to evil.example:22 is not allowed)"),
            std::string::npos) << e;
  EXPECT_NE(e.find("cloister ssh-policy NAME --add-host HOST"), std::string::npos) << e;
  EXPECT_EQ(ReadAll(out[0]), "");
  for (int fd : {out[0], err[0], devnull}) close(fd);
}

TEST(SshConnectTest, BadArgumentsAndNoProxyFailCleanly) {
  int err[2];
  ASSERT_EQ(pipe(err), 0);
  EXPECT_EQ(RunSshConnect({"host"}, -1, -1, err[1]), 2);
  EXPECT_EQ(RunSshConnect({"bad host", "22"}, -1, -1, err[1]), 2);
  EXPECT_EQ(RunSshConnect({"h\r\nX: y", "22"}, -1, -1, err[1]), 2);
  EXPECT_EQ(RunSshConnect({"host", "99999"}, -1, -1, err[1]), 2);
  uint16_t closed_port;
  {
    FakeProxy p;  // bound then closed: nothing listens there now
    closed_port = p.port;
  }
  EXPECT_EQ(RunSshConnect({"--proxy-port", std::to_string(closed_port), "host", "22"}, -1, -1, err[1]), 1);
  close(err[1]);
  std::string e = ReadAll(err[0]);
  EXPECT_NE(e.find("usage: cloister-agent ssh-connect"), std::string::npos) << e;
  EXPECT_NE(e.find("cannot reach the egress proxy"), std::string::npos) << e;
  close(err[0]);
}

}  // namespace
}  // namespace cloister::guest
