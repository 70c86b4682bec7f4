// Real curl through the proxy toward this host's own (non-loopback) interface address: the proxy
// must never connect there, whatever the egress policy says. Label: integration (needs curl).
// Traffic: only to an address of this host (delivered locally), never the network; the table test
// (upstream_address_test.cc) covers metadata, NAT64 and private ranges without sending anything.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include "proxy/test_env.h"
#include "proxy/upstream_address.h"

namespace cloister::proxy::testing {
namespace {

namespace ip = boost::asio::ip;

// A listening TCP socket on addr:0 that counts nothing but can say whether anyone connected.
class Listener {
 public:
  explicit Listener(const ip::address& addr) {
    sockaddr_storage ss{};
    socklen_t len = 0;
    if (addr.is_v4()) {
      auto* s = reinterpret_cast<sockaddr_in*>(&ss);
      s->sin_family = AF_INET;
      auto b = addr.to_v4().to_bytes();
      std::memcpy(&s->sin_addr, b.data(), 4);
      len = sizeof(sockaddr_in);
    } else {
      auto* s = reinterpret_cast<sockaddr_in6*>(&ss);
      s->sin6_family = AF_INET6;
      auto b = addr.to_v6().to_bytes();
      std::memcpy(&s->sin6_addr, b.data(), 16);
      len = sizeof(sockaddr_in6);
    }
    fd_ = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd_ < 0 || bind(fd_, reinterpret_cast<sockaddr*>(&ss), len) != 0 || listen(fd_, 8) != 0) {
      return;
    }
    getsockname(fd_, reinterpret_cast<sockaddr*>(&ss), &len);
    port_ = ntohs(addr.is_v4() ? reinterpret_cast<sockaddr_in*>(&ss)->sin_port
                               : reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port);
  }
  ~Listener() {
    if (fd_ >= 0) close(fd_);
  }
  uint16_t port() const { return port_; }
  // True when a connection is waiting (or was accepted now).
  bool Connected() {
    int c = accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (c < 0) return false;
    close(c);
    return true;
  }

 private:
  int fd_ = -1;
  uint16_t port_ = 0;
};

TEST(UpstreamAddressCurlTest, TheHostsOwnInterfaceAddressIsNeverConnected) {
  if (!ProgramExists("curl")) GTEST_SKIP() << "curl not installed";
  auto local = LocalInterfaceAddresses();
  ASSERT_TRUE(local.ok()) << local.error().message();
  std::optional<ip::address> target;
  for (const ip::address& a : *local) {
    if (a.is_loopback() || (a.is_v6() && a.to_v6().is_link_local())) continue;
    if (!target || (a.is_v4() && !target->is_v4())) target = a;
  }
  if (!target) GTEST_SKIP() << "this host has no non-loopback interface address";
  Listener listener(*target);
  ASSERT_NE(listener.port(), 0) << "cannot listen on " << target->to_string();
  const std::string literal = target->is_v4() ? target->to_string() : "[" + target->to_string() + "]";
  const std::string url = "https://" + literal + ":" + std::to_string(listener.port()) + "/";

  // Control: the listener is reachable on that address (so a proxy connection would show).
  {
    int s = socket(target->is_v4() ? AF_INET : AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ip::tcp::endpoint ep(*target, listener.port());
    ASSERT_EQ(connect(s, ep.data(), ep.size()), 0) << "control connect failed";
    close(s);
    for (int i = 0; i < 200 && !listener.Connected(); ++i) usleep(5000);
  }

  ProxyEnv env;
  env.resolve_only = false;
  // Even an egress policy that names the address (and allows nothing else) does not open it.
  env.egress_policy.allow_all = false;
  env.egress_policy.allow = {EgressRule{target->to_string(), 0}};
  env.StartProxy({});
  CurlOut r = RunCurl({"-x", env.ProxyUrl(), "--cacert", env.ca_file, url});
  EXPECT_NE(r.code, 200) << r.err;
  EXPECT_FALSE(listener.Connected()) << "the proxy connected to this host's " << target->to_string();
  std::string refusals;
  for (const auto& rec : env.TraceAtLeast(1)) refusals += rec.error + "\n";
  EXPECT_NE(refusals.find("host-interface"), std::string::npos) << refusals;
}

}  // namespace
}  // namespace cloister::proxy::testing
