// Which upstream addresses the proxy refuses to connect to, whatever name led there.
//
// Judged on every address a guest-chosen name resolves to (proxy.cc ConnectTcp), after DNS and
// before connect(2); the test-only resolve overrides (ProxyConfig::resolve) are not judged.
//
// Always refused (no policy can allow them):
//   - the host itself: every address of every local interface (getifaddrs(3), read at each check,
//     so a docker bridge that came up after the proxy started counts), loopback (127/8, ::1),
//     0/8, the unspecified addresses;
//   - link-local (169.254/16, fe80::/10) and multicast / broadcast / 240/4;
//   - cloud metadata and platform endpoints: 169.254.169.254 and 169.254.170.2 (in link-local),
//     fd00:ec2::/64 (AWS IMDS fd00:ec2::254, DNS, NTP over IPv6), fd20:ce::/64 (GCP
//     fd20:ce::254), 100.100.100.200 (Alibaba), 168.63.129.16 (Azure WireServer).
// Refused unless the workspace's egress policy names the destination (an entry of
// EgressPolicy::allow matches the requested host:port, or is the IPv4 literal of the address):
//   - private ranges: 10/8, 172.16/12, 192.168/16, CGNAT 100.64/10, ULA fc00::/7, site-local fec0::/10.
// IPv6 forms that carry an IPv4 address are judged as that IPv4 address: IPv4-mapped
// (::ffff:0:0/96), IPv4-translated (::ffff:0:0:0/96), IPv4-compatible (::/96), NAT64 well-known
// (64:ff9b::/96) and 6to4 (2002::/16). Local-use NAT64 (64:ff9b:1::/48) is refused whole: where
// the IPv4 address sits in it is site-specific (RFC 6052 /48../96) and the readings overlap.
// SECURITY: fail closed: if the local interfaces cannot be listed, every address is refused.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <boost/asio/ip/address.hpp>

#include "base/result.h"
#include "proxy/policy.h"

namespace cloister::proxy {

// Every address of every local interface (up or down). Errors when getifaddrs(3) fails.
Result<std::vector<boost::asio::ip::address>> LocalInterfaceAddresses();

// Why `a` must not be connected to for a guest that asked for host:port, or nullopt when it may.
// `local`: the host's interface addresses (LocalInterfaceAddresses()). The reason is a short
// phrase for error messages and traces ("a loopback address", "a private address ...").
std::optional<std::string> UpstreamRefusal(const boost::asio::ip::address& a,
                                           const EgressPolicy& policy, std::string_view host,
                                           uint16_t port,
                                           const std::vector<boost::asio::ip::address>& local);

// The proxy's check: UpstreamRefusal with the current local interface addresses (refuses
// everything when they cannot be listed). True: do not connect.
bool ForbiddenUpstream(const boost::asio::ip::address& a, const EgressPolicy& policy,
                       std::string_view host, uint16_t port);

// The strictest form (no policy names anything): kept for callers without a policy.
bool ForbiddenUpstream(const boost::asio::ip::address& a);

}  // namespace cloister::proxy
