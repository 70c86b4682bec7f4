#include "guest/tcp_connect.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>
#include <thread>

#include <gtest/gtest.h>

namespace cloister::guest {
namespace {

TEST(TcpConnectTest, ParsesOnlyAPlainPort) {
  EXPECT_EQ(*ParseTcpServiceArgs({"1"}), 1);
  EXPECT_EQ(*ParseTcpServiceArgs({"5173"}), 5173);
  EXPECT_EQ(*ParseTcpServiceArgs({"65535"}), 65535);
  for (const char* bad : {"", "0", "65536", "99999", "080", "+80", "-1", "80 ", "8a", "123456"}) {
    EXPECT_FALSE(ParseTcpServiceArgs({bad}).ok()) << bad;
  }
  EXPECT_FALSE(ParseTcpServiceArgs({}).ok());
  EXPECT_FALSE(ParseTcpServiceArgs({"80", "10.0.0.1"}).ok());  // no way to name another address
}

// A loopback echo server answering one connection with "ECHO:" + what it read until EOF.
int ListenLoopback(uint16_t* port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  EXPECT_EQ(listen(fd, 4), 0);
  socklen_t len = sizeof a;
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  *port = ntohs(a.sin_port);
  return fd;
}

TEST(TcpConnectTest, RelaysBothWaysWithHalfClose) {
  uint16_t port = 0;
  int lfd = ListenLoopback(&port);
  std::thread server([lfd] {
    int c = accept(lfd, nullptr, nullptr);
    std::string got;
    char buf[4096];
    ssize_t n;
    while ((n = read(c, buf, sizeof buf)) > 0) got.append(buf, static_cast<size_t>(n));
    std::string reply = "ECHO:" + got;
    (void)!write(c, reply.data(), reply.size());
    close(c);
  });
  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  std::thread relay([&] { ServeTcpConnect(sv[1], {std::to_string(port)}); });
  std::string big(300000, 'x');
  ASSERT_EQ(write(sv[0], big.data(), big.size()), static_cast<ssize_t>(big.size()));
  shutdown(sv[0], SHUT_WR);  // the server answers only after EOF: the half-close must cross
  std::string out;
  char buf[65536];
  ssize_t n;
  while ((n = read(sv[0], buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
  EXPECT_EQ(out, "ECHO:" + big);
  relay.join();
  server.join();
  close(sv[0]);
  close(lfd);
}

TEST(TcpConnectTest, NothingListeningClosesTheStream) {
  uint16_t port = 0;
  int lfd = ListenLoopback(&port);
  close(lfd);  // the port is now (almost certainly) closed
  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  ServeTcpConnect(sv[1], {std::to_string(port)});
  char c;
  EXPECT_EQ(read(sv[0], &c, 1), 0);
  close(sv[0]);
}

}  // namespace
}  // namespace cloister::guest
