// Placeholder detection (the compromise detector's tripwire): the request target, every header
// value and the body (streamed, split placeholders found) are scanned for every placeholder of
// the workspace (detector.h). A placeholder of a credential not in scope for every name of the
// request is a leak: 451, the compromise callback runs (Exchange::block, Exchange::Trip), except in
// a body sent to an LLM provider under the 'flag' LLM body policy (forwarded, recorded).
// SECURITY: scans hostile guest bytes, before any other filter changes them.
#pragma once

#include "proxy/filter.h"

namespace cloister::proxy {

class DetectionFilter : public Filter {
 public:
  const char* name() const override { return "detection"; }
  Status OnRequestHead(Exchange& ex) override;
  Status OnRequestBody(Exchange& ex, std::string& data, bool end) override;
};

}  // namespace cloister::proxy
