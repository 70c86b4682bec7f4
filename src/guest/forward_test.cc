#include "guest/forward.h"

#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace cloister::guest {
namespace {

// A connected loopback TCP pair: {client, accepted}.
std::pair<int, int> TcpPair() {
  int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof sa;
  EXPECT_EQ(bind(l, reinterpret_cast<sockaddr*>(&sa), sizeof sa), 0);
  EXPECT_EQ(listen(l, 1), 0);
  EXPECT_EQ(getsockname(l, reinterpret_cast<sockaddr*>(&sa), &len), 0);
  int c = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  EXPECT_EQ(connect(c, reinterpret_cast<sockaddr*>(&sa), sizeof sa), 0);
  int a = accept4(l, nullptr, nullptr, SOCK_CLOEXEC);
  close(l);
  return {c, a};
}

// What the client's next read says: bytes, a clean close (0) or an error (-errno).
int ReadOutcome(int fd) {
  pollfd p{fd, POLLIN, 0};
  if (poll(&p, 1, 10000) <= 0) return -ETIMEDOUT;
  char b[16];
  ssize_t n = read(fd, b, sizeof b);
  return n < 0 ? -errno : static_cast<int>(n);
}

// A proxy client reads a clean close before its CONNECT answer as "still waiting" (npm 9's proxy
// agent then waits for its whole fetch timeout); a connection that gets no stream is reset.
TEST(ForwardTest, AConnectionThatGetsNoStreamIsResetNotClosed) {
  std::vector<std::string> log;
  auto [client, accepted] = TcpPair();
  ForwardConnection(nullptr, "proxy", accepted, [&](const std::string& l) { log.push_back(l); });
  EXPECT_EQ(ReadOutcome(client), -ECONNRESET);
  close(client);

  // A channel that ended: the open fails, the client is reset, and the agent's log says why.
  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  channel::MuxOptions o;
  o.role = channel::MuxRole::kGuest;
  auto mux = channel::Mux::Create(sv[0], o);
  ASSERT_TRUE(mux.ok());
  close(sv[1]);
  ASSERT_TRUE((*mux)->Start().ok());
  ASSERT_TRUE((*mux)->WaitFor(std::chrono::seconds(10)));
  auto [client2, accepted2] = TcpPair();
  ForwardConnection(mux->get(), "proxy", accepted2, [&](const std::string& l) { log.push_back(l); });
  EXPECT_EQ(ReadOutcome(client2), -ECONNRESET);
  close(client2);
  ASSERT_EQ(log.size(), 1u);
  EXPECT_NE(log[0].find("forward to host service proxy"), std::string::npos) << log[0];
}

}  // namespace
}  // namespace cloister::guest
