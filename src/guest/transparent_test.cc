// Transparent egress pieces that need no network namespace: the rules text, the header, the
// config, and the agent's DNS servers and listener on loopback (no redirect: the listener must
// refuse a connection that was not redirected to it).
#include "guest/transparent.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>

#include <gtest/gtest.h>

#include "guest/config.h"
#include "vm/meta_disk.h"

namespace cloister::guest {
namespace {

std::string AQuery(uint16_t id, const std::string& label1, const std::string& label2) {
  std::string m;
  m.push_back(static_cast<char>(id >> 8));
  m.push_back(static_cast<char>(id & 0xFF));
  m += std::string("\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00", 10);
  m.push_back(static_cast<char>(label1.size()));
  m += label1;
  m.push_back(static_cast<char>(label2.size()));
  m += label2;
  m += std::string("\x00\x00\x01\x00\x01", 5);
  return m;
}

uint32_t LastA(const std::string& r) {
  size_t n = r.size();
  return (static_cast<uint32_t>(static_cast<uint8_t>(r[n - 4])) << 24) |
         (static_cast<uint32_t>(static_cast<uint8_t>(r[n - 3])) << 16) |
         (static_cast<uint32_t>(static_cast<uint8_t>(r[n - 2])) << 8) | static_cast<uint8_t>(r[n - 1]);
}

sockaddr_in Loopback(uint16_t port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(port);
  return a;
}

bool Readable(int fd, int ms) {
  pollfd p{fd, POLLIN, 0};
  return poll(&p, 1, ms) == 1;
}

TEST(TransparentTest, RulesetRedirectsTcpAndDnsExceptLoopbackAndRejectsTheRest) {
  std::string r = RedirectRuleset(3129, 53);
  EXPECT_NE(r.find("table ip cloister {"), std::string::npos);
  EXPECT_NE(r.find("delete table ip cloister"), std::string::npos);  // idempotent reload
  EXPECT_NE(r.find("type nat hook output priority -100"), std::string::npos);
  EXPECT_NE(r.find("type nat hook prerouting priority -100"), std::string::npos);
  EXPECT_NE(r.find("ip daddr 127.0.0.0/8 return"), std::string::npos);
  EXPECT_NE(r.find("meta l4proto tcp redirect to :3129"), std::string::npos);
  EXPECT_NE(r.find("th dport 53 redirect to :53"), std::string::npos);
  EXPECT_NE(r.find("type filter hook output priority 0"), std::string::npos);
  EXPECT_NE(r.find("    reject\n"), std::string::npos);
  std::string nat = RedirectNatRuleset(4000, 5353);
  EXPECT_NE(nat.find("redirect to :4000"), std::string::npos);
  EXPECT_NE(nat.find("redirect to :5353"), std::string::npos);
  EXPECT_EQ(nat.find("reject"), std::string::npos);
}

TEST(TransparentTest, HeaderIsOneLineWithinTheHostsBound) {
  EXPECT_EQ(TransparentHeader("api.example.test", 443), "api.example.test 443\n");
  std::string longest;
  while (longest.size() < 252) longest += "a.";
  longest += "b";
  ASSERT_TRUE(ValidHostName(longest));
  EXPECT_LE(TransparentHeader(longest, 65535).size(), kMaxTransparentHeader);
}

TEST(TransparentTest, ConfigEnablesTransparentModeOnlyWhenTheHostSaysSo) {
  auto off = ParseAgentConfig(R"({"version":1})");
  ASSERT_TRUE(off.ok());
  EXPECT_FALSE(off->transparent.enabled);
  auto on = ParseAgentConfig(R"({"version":1,"transparent":{"service":"egress","port":3129,"dns_port":53}})");
  ASSERT_TRUE(on.ok()) << on.error().message();
  EXPECT_TRUE(on->transparent.enabled);
  EXPECT_EQ(on->transparent.service, "egress");
  EXPECT_EQ(on->transparent.port, 3129);
  EXPECT_EQ(on->transparent.dns_port, 53);
  auto disabled = ParseAgentConfig(R"({"transparent":{"enabled":false}})");
  ASSERT_TRUE(disabled.ok());
  EXPECT_FALSE(disabled->transparent.enabled);
  EXPECT_FALSE(ParseAgentConfig(R"({"transparent":[]})").ok());
  EXPECT_FALSE(ParseAgentConfig(R"({"transparent":{"port":0}})").ok());
  EXPECT_FALSE(ParseAgentConfig(R"({"transparent":{"dns_port":70000}})").ok());
  EXPECT_FALSE(ParseAgentConfig(R"({"transparent":{"service":""}})").ok());
}

TEST(TransparentTest, TheHostsMetadataConfigTurnsItOnWithTheAgreedServiceAndPorts) {
  vm::MetaConfig mc;
  mc.workspace = "ws";
  mc.boot_id = "b";
  auto c = ParseAgentConfig(vm::MetaConfigJson(mc).dump());
  ASSERT_TRUE(c.ok()) << c.error().message();
  EXPECT_TRUE(c->transparent.enabled);
  EXPECT_EQ(c->transparent.service, kTransparentService);
  EXPECT_EQ(c->transparent.port, kTransparentPort);
  EXPECT_EQ(c->transparent.dns_port, kGuestDnsPort);
}

TEST(TransparentTest, DnsServersAnswerOverUdpAndTcpFromOneMapAndTheListenerRefusesDirectConnections) {
  std::atomic<int> opened{0};
  TransparentOptions o;
  o.port = 0;
  o.dns_port = 0;
  o.system_setup = false;
  o.hostname = "ws";
  auto t = TransparentEgress::Start(
      o, [&](const std::string&, int fd) { ++opened; close(fd); }, [](const std::string&) {});
  ASSERT_TRUE(t.ok()) << t.error().message();
  uint16_t dns = (*t)->dns_port();
  ASSERT_NE(dns, 0);

  // UDP.
  int u = socket(AF_INET, SOCK_DGRAM, 0);
  sockaddr_in to = Loopback(dns);
  ASSERT_EQ(connect(u, reinterpret_cast<sockaddr*>(&to), sizeof to), 0);
  std::string q = AQuery(0x4242, "api", "test");
  ASSERT_EQ(send(u, q.data(), q.size(), 0), static_cast<ssize_t>(q.size()));
  ASSERT_TRUE(Readable(u, 10000));
  char buf[1024];
  ssize_t n = recv(u, buf, sizeof buf, 0);
  ASSERT_GT(n, 16);
  std::string r(buf, static_cast<size_t>(n));
  EXPECT_EQ(static_cast<uint8_t>(r[0]), 0x42);
  uint32_t a = LastA(r);
  EXPECT_TRUE(IsSynthetic(a));
  EXPECT_EQ((*t)->map().NameFor(a), "api.test");
  close(u);

  // TCP (length-prefixed), two queries on one connection; the same name keeps its address.
  int c = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_EQ(connect(c, reinterpret_cast<sockaddr*>(&to), sizeof to), 0);
  for (const std::string& name : {std::string("api"), std::string("web")}) {
    std::string tq = AQuery(7, name, "test");
    std::string framed = std::string(1, '\0') + static_cast<char>(tq.size()) + tq;
    ASSERT_EQ(send(c, framed.data(), framed.size(), 0), static_cast<ssize_t>(framed.size()));
    std::string got;
    while (got.size() < 2 || got.size() < 2u + ((static_cast<uint8_t>(got[0]) << 8) | static_cast<uint8_t>(got[1]))) {
      ASSERT_TRUE(Readable(c, 10000));
      ssize_t m = recv(c, buf, sizeof buf, 0);
      ASSERT_GT(m, 0);
      got.append(buf, static_cast<size_t>(m));
    }
    uint32_t addr = LastA(got);
    if (name == "api") {
      EXPECT_EQ(addr, a);
    } else {
      EXPECT_NE(addr, a);
      EXPECT_EQ((*t)->map().NameFor(addr), "web.test");
    }
  }
  close(c);

  // A connection that was not redirected (its original destination is the listener itself) is
  // reset and never becomes a stream to the host.
  int d = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in l = Loopback((*t)->port());
  ASSERT_EQ(connect(d, reinterpret_cast<sockaddr*>(&l), sizeof l), 0);
  ASSERT_TRUE(Readable(d, 10000));
  errno = 0;
  n = recv(d, buf, sizeof buf, 0);
  EXPECT_EQ(n, -1);
  EXPECT_EQ(errno, ECONNRESET);
  close(d);
  EXPECT_EQ(opened.load(), 0);
}

}  // namespace
}  // namespace cloister::guest
