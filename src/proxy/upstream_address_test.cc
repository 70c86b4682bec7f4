#include "proxy/upstream_address.h"

#include <gtest/gtest.h>

namespace cloister::proxy {
namespace {

namespace ip = boost::asio::ip;

bool Forbidden(const char* text) { return ForbiddenUpstream(ip::make_address(text)); }

// The table: judged against a fixed set of "local interface" addresses (a docker-like bridge and
// a LAN address), not the machine's, so the table means the same on every host.
const std::vector<ip::address>& FakeLocal() {
  static const std::vector<ip::address> local = {
      ip::make_address("127.0.0.1"), ip::make_address("172.17.0.1"),
      ip::make_address("198.51.100.7"), ip::make_address("2001:db8::7"), ip::make_address("::1")};
  return local;
}

std::optional<std::string> Refusal(const char* text, const EgressPolicy& policy = {},
                                   std::string_view host = "guest.test", uint16_t port = 443) {
  return UpstreamRefusal(ip::make_address(text), policy, host, port, FakeLocal());
}

TEST(UpstreamAddressTest, TheHostLinkLocalMetadataAndMulticastAreForbidden) {
  for (const char* a : {
           "127.0.0.1", "127.1.2.3", "0.0.0.0", "0.1.2.3", "169.254.169.254", "169.254.170.2",
           "169.254.0.1", "224.0.0.251", "239.255.255.250", "255.255.255.255", "240.0.0.1",
           "100.100.100.200", "168.63.129.16", "::1", "::", "fe80::1", "ff02::1",
           // cloud metadata over IPv6: AWS IMDS, DNS, NTP; GCP
           "fd00:ec2::254", "fd00:ec2::253", "fd00:ec2::123", "fd20:ce::254",
           // this host's own interfaces (the fake list): a docker bridge, a public-looking LAN
           // address, an IPv6 address
           "172.17.0.1", "198.51.100.7", "2001:db8::7",
           // IPv4 carried in IPv6
           "::ffff:127.0.0.1", "::ffff:169.254.169.254", "::ffff:0.0.0.0", "::ffff:172.17.0.1",
           "::ffff:0:127.0.0.1", "::127.0.0.1", "::169.254.169.254",
           // NAT64 well-known prefix
           "64:ff9b::127.0.0.1", "64:ff9b::7f00:1", "64:ff9b::169.254.169.254",
           "64:ff9b::100.100.100.200", "64:ff9b::198.51.100.7",
           // local-use NAT64 (RFC 8215) in each RFC 6052 layout: /48, /56, /64, /96 of 127.0.0.1,
           // and of a public address (its layout cannot be known: refused whole)
           "64:ff9b:1:7f00:0:100::", "64:ff9b:1:7f:0:1::", "64:ff9b:1::7f:0:100:0",
           "64:ff9b:1::127.0.0.1", "64:ff9b:1::169.254.169.254", "64:ff9b:1::93.184.216.34",
           // 6to4 of loopback and metadata
           "2002:7f00:1::1", "2002:a9fe:a9fe::1"}) {
    EXPECT_TRUE(Refusal(a).has_value()) << a;
    // No policy entry can allow them, not even one naming the host or the literal.
    EgressPolicy named;
    named.allow_all = false;
    named.allow = {EgressRule{"guest.test", 0}, EgressRule{a, 0}};
    EXPECT_TRUE(Refusal(a, named).has_value()) << a << " allowed by naming it";
  }
}

TEST(UpstreamAddressTest, PrivateRangesNeedThePolicyToNameThem) {
  const char* priv[] = {"10.0.0.1",       "172.16.0.1",         "172.31.255.254",
                        "192.168.1.10",   "100.64.0.1",         "100.127.255.254",
                        "fd00::1",        "fc00::5",            "fec0::1",
                        "::ffff:10.1.2.3", "64:ff9b::10.1.2.3", "64:ff9b::192.168.0.1"};
  for (const char* a : priv) {
    auto r = Refusal(a);
    ASSERT_TRUE(r.has_value()) << a;
    EXPECT_NE(r->find("private"), std::string::npos) << a << ": " << *r;
  }
  EgressPolicy p;
  p.allow_all = true;
  p.allow = {EgressRule{"db.corp.test", 0}, EgressRule{"*.lan.test", 5432},
             EgressRule{"10.9.9.9", 0}};
  for (const char* a : priv) {
    EXPECT_FALSE(Refusal(a, p, "db.corp.test", 443).has_value()) << a << " named by its host";
    EXPECT_FALSE(Refusal(a, p, "pg.lan.test", 5432).has_value()) << a << " named by *.lan.test:5432";
    EXPECT_TRUE(Refusal(a, p, "pg.lan.test", 443).has_value()) << a << " the rule names 5432 only";
    EXPECT_TRUE(Refusal(a, p, "other.test", 443).has_value()) << a << " not named";
  }
  // An IPv4 literal entry names that address whatever name led there.
  EXPECT_FALSE(Refusal("10.9.9.9", p, "whatever.test", 443).has_value());
  EXPECT_FALSE(Refusal("::ffff:10.9.9.9", p, "whatever.test", 443).has_value());
  EXPECT_TRUE(Refusal("10.9.9.8", p, "whatever.test", 443).has_value());
}

TEST(UpstreamAddressTest, PublicAddressesAreAllowed) {
  for (const char* a : {"93.184.216.34", "169.253.255.255", "169.255.0.1", "1.0.0.0",
                        "172.32.0.1", "100.128.0.1", "100.63.255.255", "2606:4700::1111",
                        "::ffff:93.184.216.34", "64:ff9b::93.184.216.34", "2600:1f18::254",
                        "2002:5db8:d822::1", "198.51.100.8"}) {
    EXPECT_FALSE(Refusal(a).has_value()) << a << ": " << Refusal(a).value_or("");
  }
}

TEST(UpstreamAddressTest, TheRealHostsInterfaceAddressesAreForbidden) {
  auto local = LocalInterfaceAddresses();
  ASSERT_TRUE(local.ok()) << local.error().message();
  ASSERT_FALSE(local->empty());
  EgressPolicy named;
  for (const ip::address& a : *local) {
    named.allow.push_back(EgressRule{a.to_string(), 0});
  }
  for (const ip::address& a : *local) {
    EXPECT_TRUE(ForbiddenUpstream(a, named, a.to_string(), 443)) << a.to_string();
  }
  // The one-argument form is the strict one.
  EXPECT_TRUE(Forbidden("10.0.0.1"));
  EXPECT_TRUE(Forbidden("fd20:ce::254"));
  EXPECT_FALSE(Forbidden("93.184.216.34"));
}

}  // namespace
}  // namespace cloister::proxy
