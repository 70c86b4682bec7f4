// Whether a request would have a real value of a workspace credential put into it: the one
// decision, for every credential kind, that the consent filter asks by and the swapping filters
// swap by, so that a kind cannot be swapped without counting as a use.
//
//   header   its placeholder is in one of its headers (the kind's, or kind 'header''s own), also
//            inside Basic: HeaderSubstitutionFilter swaps it;
//   body     it swaps in bodies (--body): BodySwapFilter; the body is not read yet, so every
//            request in scope counts (asking too often is the safe side);
//   filter   a request filter names it (RequestFilter::WouldSwap): the AWS re-signer for `aws`,
//            the OAuth filter for a subscription login's access token.
// Only a TLS-intercepted request whose names agree, toward a host in the credential's scope
// (Exchange::in_scope), can get a real value at all.
//
// SECURITY: CheckConsented is the last lock at each place a real value goes in: a credential with
// an ask policy is swapped only after this request's decision allowed it, so a mismatch between
// WouldSwap and a swap fails closed (403), never silently open.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "proxy/exchange.h"

namespace cloister::proxy {

struct CredentialUse {
  bool header = false;
  bool body = false;
  bool filter = false;
  bool any() const { return header || body || filter; }
};

// For credential `index` of ex.ctx.config->credentials (pure).
CredentialUse WouldSwap(const Exchange& ex, size_t index);
// The parts, for the filters that swap each way.
bool WouldSwapInHeaders(const Exchange& ex, size_t index);
bool WouldSwapInBody(const Exchange& ex, size_t index);
bool WouldSwapInFilter(const Exchange& ex, size_t index);

// The lower-case header names a credential's placeholder is substituted in.
std::vector<std::string> SubstitutedHeaders(const vault::Credential& c);

// OK when credential `index` may be swapped into this request: no ask policy, or a decision of
// this request allowed it (Exchange::consent_decided); else the request is refused (403).
Status CheckConsented(Exchange& ex, size_t index);
// The same by credential id (a request filter's SwappedValue); an id that is no workspace
// credential (a value the filter holds itself) passes.
Status CheckConsented(Exchange& ex, const std::string& credential);

}  // namespace cloister::proxy
