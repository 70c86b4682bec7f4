// A filter of the proxy's chain (chain.h): every proxied request (proxy mode and transparent mode,
// plain HTTP and TLS-intercepted) passes through the chain's filters in order.
//
// Hooks, each returning Status (an error stops the request: see Exchange::Refuse / Exchange::Trip):
//   OnRequestHead   in list order, once the head is read (nothing has gone upstream). A filter
//                   that must wait for a decision outside the proxy (consent_filter.h) sets
//                   Exchange::consent_wait: the chain stops after it, and the driver calls
//                   OnRequestHead again (from that filter) once the ticket is decided.
//   OnRequestBody   in list order, for each piece of the (de-chunked) request body; the piece may
//                   be rewritten in place. With Exchange::body_whole the whole body comes in one
//                   call (end == true); otherwise the body streams (first the held bytes, then
//                   each piece, end == true on the last).
//   OnResponseHead  in REVERSE list order (the filter nearest upstream sees the response first)
//   OnResponseBody  in reverse list order, per piece (the whole body at once with
//                   Exchange::hold_response)
// The async I/O (sockets, Beast parsers, hold-back, upstream connections) is the driver's
// (http_driver.h); filters never do I/O, so each is testable with a Beast head and a string.
// Filters are stateless across requests (per-request state lives in the Exchange), so one chain
// serves every connection and thread.
// Adding a filter: one new file (a class implementing Filter) and one line in DefaultChain.
// (Other modules plug in through extension_filter.h, which one filter of the chain runs.)
#pragma once

#include <string>

#include "proxy/exchange.h"

namespace cloister::proxy {

class Filter {
 public:
  virtual ~Filter() = default;
  virtual const char* name() const = 0;
  virtual Status OnRequestHead(Exchange&) { return OkStatus(); }
  virtual Status OnRequestBody(Exchange&, std::string& /*data*/, bool /*end*/) { return OkStatus(); }
  virtual Status OnResponseHead(Exchange&, ResponseHeader&) { return OkStatus(); }
  virtual Status OnResponseBody(Exchange&, ResponseHeader&, std::string& /*data*/, bool /*end*/) {
    return OkStatus();
  }
};

}  // namespace cloister::proxy
