// Response redaction: every real value that went out with the request (header or body swap, and
// every value an extension filter put in: ExtensionVerdict::swapped) is replaced by its
// placeholder in the response's headers and body, in every form redactor.h knows (raw,
// URL-encoded, base64, hex); streamed bodies stay incremental. On the way back it runs after the
// extension filters' response transforms (chain.cc), on the bytes the guest gets.
// SECURITY: the last line between a reflecting upstream and the guest.
#pragma once

#include "proxy/filter.h"

namespace cloister::proxy {

class ResponseRedactionFilter : public Filter {
 public:
  const char* name() const override { return "response_redaction"; }
  Status OnResponseHead(Exchange& ex, ResponseHeader& res) override;
  Status OnResponseBody(Exchange& ex, ResponseHeader& res, std::string& data, bool end) override;
};

}  // namespace cloister::proxy
