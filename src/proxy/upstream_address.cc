#include "proxy/upstream_address.h"

#include <ifaddrs.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>

namespace cloister::proxy {
namespace {

namespace ip = boost::asio::ip;
using Bytes6 = ip::address_v6::bytes_type;

bool InV4(uint32_t v, uint32_t net, int bits) {
  uint32_t mask = bits == 0 ? 0 : ~uint32_t{0} << (32 - bits);
  return (v & mask) == (net & mask);
}

constexpr uint32_t V4(uint8_t a, uint8_t b, uint8_t c, uint8_t d) {
  return (uint32_t{a} << 24) | (uint32_t{b} << 16) | (uint32_t{c} << 8) | d;
}

// Bytes of `a` from `prefix` (hex pairs) match: a prefix of `bits` bits.
bool InV6(const Bytes6& b, const std::array<uint8_t, 16>& net, int bits) {
  for (int i = 0; i < 16 && bits > 0; ++i, bits -= 8) {
    uint8_t mask = bits >= 8 ? 0xff : static_cast<uint8_t>(0xff << (8 - bits));
    if ((b[i] & mask) != (net[i] & mask)) return false;
  }
  return true;
}

ip::address_v4 V4At(const Bytes6& b, std::initializer_list<int> idx) {
  ip::address_v4::bytes_type out{};
  size_t i = 0;
  for (int k : idx) out[i++] = b[static_cast<size_t>(k)];
  return ip::address_v4(out);
}

bool PolicyNames(const EgressPolicy& policy, std::string_view host, uint16_t port,
                 const std::string& literal) {
  return std::any_of(policy.allow.begin(), policy.allow.end(), [&](const EgressRule& r) {
    return r.Matches(host, port) || r.Matches(literal, port);
  });
}

bool IsLocal(const ip::address& a, const std::vector<ip::address>& local) {
  return std::find(local.begin(), local.end(), a) != local.end();
}

std::optional<std::string> V4Refusal(const ip::address_v4& a4, const EgressPolicy& policy,
                                     std::string_view host, uint16_t port,
                                     const std::vector<ip::address>& local) {
  uint32_t v = a4.to_uint();
  if (IsLocal(ip::address(a4), local)) return "an address of this host's own interfaces";
  if (InV4(v, V4(127, 0, 0, 0), 8)) return "a loopback address";
  if (InV4(v, 0, 8)) return "an unspecified (0/8) address";
  if (v == V4(169, 254, 169, 254) || v == V4(169, 254, 170, 2) || v == V4(100, 100, 100, 200) ||
      v == V4(168, 63, 129, 16)) {
    return "a cloud metadata endpoint";
  }
  if (InV4(v, V4(169, 254, 0, 0), 16)) return "a link-local address";
  if (InV4(v, V4(224, 0, 0, 0), 4)) return "a multicast address";
  if (InV4(v, V4(240, 0, 0, 0), 4)) return "a reserved or broadcast address";
  bool priv = InV4(v, V4(10, 0, 0, 0), 8) || InV4(v, V4(172, 16, 0, 0), 12) ||
              InV4(v, V4(192, 168, 0, 0), 16) || InV4(v, V4(100, 64, 0, 0), 10);
  if (priv && !PolicyNames(policy, host, port, a4.to_string())) {
    return "a private address the egress policy does not name";
  }
  return std::nullopt;
}

}  // namespace

Result<std::vector<ip::address>> LocalInterfaceAddresses() {
  struct ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) {
    return Error(ErrorCode::kUnavailable,
                 std::string("cannot list this host's interface addresses: ") + std::strerror(errno));
  }
  std::vector<ip::address> out;
  for (struct ifaddrs* i = list; i != nullptr; i = i->ifa_next) {
    if (i->ifa_addr == nullptr) continue;
    if (i->ifa_addr->sa_family == AF_INET) {
      const auto* sin = reinterpret_cast<const sockaddr_in*>(i->ifa_addr);
      ip::address_v4::bytes_type b;
      std::memcpy(b.data(), &sin->sin_addr, 4);
      out.emplace_back(ip::address_v4(b));
    } else if (i->ifa_addr->sa_family == AF_INET6) {
      const auto* sin6 = reinterpret_cast<const sockaddr_in6*>(i->ifa_addr);
      Bytes6 b;
      std::memcpy(b.data(), &sin6->sin6_addr, 16);
      out.emplace_back(ip::address_v6(b));  // scope dropped: any scope of the address is local
    }
  }
  freeifaddrs(list);
  return out;
}

std::optional<std::string> UpstreamRefusal(const ip::address& a, const EgressPolicy& policy,
                                           std::string_view host, uint16_t port,
                                           const std::vector<ip::address>& local) {
  if (a.is_v4()) return V4Refusal(a.to_v4(), policy, host, port, local);
  // SECURITY: judge the IPv6 address without its scope id (fe80::1%eth0 is fe80::1).
  const Bytes6 b = a.to_v6().to_bytes();
  const ip::address plain{ip::address_v6(b)};
  if (IsLocal(plain, local)) return "an address of this host's own interfaces";
  const ip::address_v6 v6(b);
  if (v6.is_unspecified()) return "an unspecified address";
  if (v6.is_loopback()) return "a loopback address";
  // Forms that carry an IPv4 address: judged as that address.
  if (InV6(b, {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff}, 96) ||             // ::ffff:0:0/96
      InV6(b, {0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0, 0}, 96) ||             // ::ffff:0:0:0/96
      InV6(b, {0, 0x64, 0xff, 0x9b}, 96) ||                                   // 64:ff9b::/96
      InV6(b, {}, 96)) {                                                      // ::/96
    return V4Refusal(V4At(b, {12, 13, 14, 15}), policy, host, port, local);
  }
  if (InV6(b, {0, 0x64, 0xff, 0x9b, 0, 1}, 48)) {
    // Local-use NAT64 (RFC 8215): where the IPv4 address sits depends on the site's prefix length
    // (RFC 6052 /48, /56, /64 or /96), and the readings overlap (the /96 form of 10.0.0.1 reads
    // as 0.0.0.10 at /64), so it cannot be judged: refused whole.
    return "a local-use NAT64 (64:ff9b:1::/48) address, whose embedded IPv4 address cannot be judged";
  }
  if (InV6(b, {0x20, 0x02}, 16)) {  // 6to4
    auto r = V4Refusal(V4At(b, {2, 3, 4, 5}), policy, host, port, local);
    if (r) return "a 6to4 form of " + *r;
    return std::nullopt;
  }
  if (InV6(b, {0xfd, 0x00, 0x0e, 0xc2}, 64) || InV6(b, {0xfd, 0x20, 0x00, 0xce}, 64)) {
    return "a cloud metadata endpoint";
  }
  if (v6.is_link_local()) return "a link-local address";
  if (v6.is_multicast()) return "a multicast address";
  bool priv = InV6(b, {0xfc}, 7) || InV6(b, {0xfe, 0xc0}, 10);
  if (priv && !PolicyNames(policy, host, port, v6.to_string())) {
    return "a private (ULA) address the egress policy does not name";
  }
  return std::nullopt;
}

bool ForbiddenUpstream(const ip::address& a, const EgressPolicy& policy, std::string_view host,
                       uint16_t port) {
  auto local = LocalInterfaceAddresses();
  if (!local.ok()) return true;  // SECURITY: fail closed
  return UpstreamRefusal(a, policy, host, port, *local).has_value();
}

bool ForbiddenUpstream(const ip::address& a) {
  return ForbiddenUpstream(a, EgressPolicy{}, "", 0);
}

}  // namespace cloister::proxy
