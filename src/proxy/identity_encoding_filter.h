// Identity encoding: a request that carried a real value (the redactor is active) or has a
// response transform is sent with Accept-Encoding: identity, and a response to it with any other
// Content-Encoding is refused with 502, so redaction and transforms always see the bytes the guest
// would get (a gzip-compressed echo of a key cannot slip past the redactor).
// SECURITY: fails closed on a response it cannot inspect.
#pragma once

#include "proxy/filter.h"

namespace cloister::proxy {

class IdentityEncodingFilter : public Filter {
 public:
  const char* name() const override { return "identity_encoding"; }
  Status OnRequestHead(Exchange& ex) override;
  Status OnResponseHead(Exchange& ex, ResponseHeader& res) override;
};

}  // namespace cloister::proxy
