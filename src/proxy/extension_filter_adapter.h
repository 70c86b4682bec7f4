// Runs the configured extension filters (ProxyConfig::extension_filters, extension_filter.h: AWS
// re-signing and credential custody, oauth logins) on TLS-intercepted requests whose names agree:
// their head rewrites, whole body (OnFullBody; a body too long to hold is 413), body transforms,
// and response transforms (ResponseTransform: OnHead, then the whole body with a recomputed
// Content-Length when it asks to hold; a request with one is sent with Accept-Encoding: identity,
// see IdentityEncodingFilter).
// A filter error is 403; kCompromised trips the detector (451). The real values a filter says it
// put in (ExtensionVerdict::swapped) are checked against the consent decisions of the request,
// given to the response redaction and named in the trace.
#pragma once

#include "proxy/filter.h"

namespace cloister::proxy {

// The extension filters' view of a head (extension_filter.h RequestHead) toward `target`.
RequestHead FilterHeadOf(const RequestHeader& req, const Authority& target);

class ExtensionFilterAdapter : public Filter {
 public:
  const char* name() const override { return "extension_filters"; }
  Status OnRequestHead(Exchange& ex) override;
  Status OnRequestBody(Exchange& ex, std::string& data, bool end) override;
  Status OnResponseHead(Exchange& ex, ResponseHeader& res) override;
  Status OnResponseBody(Exchange& ex, ResponseHeader& res, std::string& data, bool end) override;
};

}  // namespace cloister::proxy
