#include "proxy/upstream_address.h"

#include <gtest/gtest.h>

namespace cloister::proxy {
namespace {

bool Forbidden(const char* text) { return ForbiddenUpstream(boost::asio::ip::make_address(text)); }

TEST(UpstreamAddressTest, TheHostLinkLocalAndMulticastAreForbidden) {
  for (const char* a : {"127.0.0.1", "127.1.2.3", "0.0.0.0", "0.1.2.3", "169.254.169.254",
                        "169.254.0.1", "224.0.0.251", "239.255.255.250", "::1", "::",
                        "fe80::1", "ff02::1", "::ffff:127.0.0.1", "::ffff:169.254.169.254",
                        "::ffff:0.0.0.0"}) {
    EXPECT_TRUE(Forbidden(a)) << a;
  }
}

TEST(UpstreamAddressTest, PublicAndPrivateAddressesAreAllowed) {
  for (const char* a : {"93.184.216.34", "10.0.0.1", "192.168.1.10", "172.16.0.1", "100.64.0.1",
                        "169.253.255.255", "169.255.0.1", "1.0.0.0", "2606:4700::1111",
                        "fd00::1", "::ffff:93.184.216.34"}) {
    EXPECT_FALSE(Forbidden(a)) << a;
  }
}

}  // namespace
}  // namespace cloister::proxy
