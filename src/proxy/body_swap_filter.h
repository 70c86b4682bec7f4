// Request-body swap: for in-scope credentials that opted in (--body), placeholders in the body of
// a TLS-intercepted request whose names agree are replaced by the real value. A held body gets any
// length (the driver recomputes Content-Length); a streamed body only equal-length swaps (the
// declared length stays right), found across pieces.
// SECURITY: handles real values; the redactor learns each one.
#pragma once

#include "proxy/filter.h"

namespace cloister::proxy {

class BodySwapFilter : public Filter {
 public:
  const char* name() const override { return "body_swap"; }
  Status OnRequestHead(Exchange& ex) override;
  Status OnRequestBody(Exchange& ex, std::string& data, bool end) override;
};

}  // namespace cloister::proxy
