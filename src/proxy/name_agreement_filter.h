// Name agreement in proxy mode: the CONNECT authority, the TLS SNI (when the client sent one) and
// the Host header name the same host, and a plain absolute-form request's Host names its target's
// host; else 421 and nothing is forwarded. Without it, CONNECT allowed.test then Host: blocked.test
// reaches blocked.test through a front shared by both names (the egress policy judged only the
// CONNECT). Transparent mode checks the same in DestinationFilter and TLS interception. Runs after
// detection, so a placeholder sent toward a disagreeing name still trips.
// SECURITY: compares guest-chosen names; fails closed.
#pragma once

#include "proxy/filter.h"

namespace cloister::proxy {

class NameAgreementFilter : public Filter {
 public:
  const char* name() const override { return "name_agreement"; }
  Status OnRequestHead(Exchange& ex) override;
};

}  // namespace cloister::proxy
