// Which upstream addresses the proxy refuses to connect to, whatever name led there.
#pragma once

#include <boost/asio/ip/address.hpp>

namespace cloister::proxy {

// SECURITY: true for addresses a guest must never reach through a name it chose: the host itself
// (loopback, 0/8, unspecified), link-local (cloud metadata at 169.254.169.254, fe80::/10) and
// multicast. IPv4-mapped IPv6 addresses are judged as the IPv4 address they carry. Private
// ranges (10/8, 192.168/16, ...) stay reachable: a company's own hosts live there.
bool ForbiddenUpstream(const boost::asio::ip::address& a);

}  // namespace cloister::proxy
