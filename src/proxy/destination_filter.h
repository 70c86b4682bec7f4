// Destination and scope: where the request goes (proxy mode: the absolute-form target, which
// the egress policy must allow, else 403; TLS and transparent mode: the connection's host:port,
// which a target in absolute form must name, else 400), which names it claims (target, Host,
// SNI), which credentials are in scope for all of them, and whether those names agree. Transparent
// mode: a Host other than the connection's name is 421. After a trip every request is 451.
// SECURITY: the target and Host are guest bytes (already checked by http_head.h's rules).
#pragma once

#include "proxy/filter.h"

namespace cloister::proxy {

class DestinationFilter : public Filter {
 public:
  const char* name() const override { return "destination"; }
  Status OnRequestHead(Exchange& ex) override;
};

}  // namespace cloister::proxy
