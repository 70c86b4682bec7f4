// Header substitution: in a TLS-intercepted request whose names agree, placeholders of in-scope
// credentials are replaced by real values in the credential's own headers (the kind's headers, or
// the header of kind 'header'), also inside Basic auth (SubstituteInHeader, proxy.h). Each real
// value sent is registered with the exchange's redactor.
// SECURITY: handles real values; wipes its copies.
#pragma once

#include "proxy/filter.h"

namespace cloister::proxy {

class HeaderSubstitutionFilter : public Filter {
 public:
  const char* name() const override { return "header_substitution"; }
  Status OnRequestHead(Exchange& ex) override;
};

}  // namespace cloister::proxy
