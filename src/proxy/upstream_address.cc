#include "proxy/upstream_address.h"

namespace cloister::proxy {

bool ForbiddenUpstream(const boost::asio::ip::address& a) {
  namespace ip = boost::asio::ip;
  if (a.is_v6() && a.to_v6().is_v4_mapped()) {
    return ForbiddenUpstream(ip::make_address_v4(ip::v4_mapped, a.to_v6()));
  }
  if (a.is_loopback() || a.is_unspecified() || a.is_multicast()) return true;
  if (a.is_v4()) {
    uint32_t v = a.to_v4().to_uint();
    return (v >> 16) == 0xA9FE /* 169.254/16 */ || (v >> 24) == 0 /* 0/8 */;
  }
  return a.to_v6().is_link_local();
}

}  // namespace cloister::proxy
