#include "proxy/credential_use.h"

#include <algorithm>

#include "proxy/extension_filter_adapter.h"
#include "proxy/proxy.h"
#include "vault/crypto.h"

namespace cloister::proxy {
namespace {

bool Eligible(const Exchange& ex, size_t index) {
  return ex.origin.tls && ex.names_agree &&
         std::find(ex.in_scope.begin(), ex.in_scope.end(), index) != ex.in_scope.end();
}

}  // namespace

std::vector<std::string> SubstitutedHeaders(const vault::Credential& c) {
  return c.kind == vault::CredentialKind::kHeader ? std::vector<std::string>{c.header}
                                                  : vault::InfoFor(c.kind).headers;
}

bool WouldSwapInHeaders(const Exchange& ex, size_t index) {
  if (!Eligible(ex, index)) return false;
  const vault::BoundCredential& b = ex.ctx.config->credentials[index];
  for (const std::string& name : SubstitutedHeaders(b.credential)) {
    if (name.empty()) continue;
    auto range = ex.req.equal_range(name);
    for (auto it = range.first; it != range.second; ++it) {
      std::string_view v(it->value().data(), it->value().size());
      // The finder the substitution uses (also inside Basic): a swap of the placeholder by itself
      // finds exactly what HeaderSubstitutionFilter would swap.
      std::optional<std::string> found = SubstituteInHeader(v, b.placeholder, b.placeholder);
      if (found) {
        vault::SecureWipe(*found);
        return true;
      }
    }
  }
  return false;
}

bool WouldSwapInBody(const Exchange& ex, size_t index) {
  return Eligible(ex, index) && ex.ctx.config->credentials[index].credential.body_substitution;
}

bool WouldSwapInFilter(const Exchange& ex, size_t index) {
  if (!Eligible(ex, index) || ex.ctx.config->extension_filters.empty()) return false;
  const std::string& id = ex.ctx.config->credentials[index].credential.id;
  RequestHead head = FilterHeadOf(ex.req, ex.target);
  for (const auto& f : ex.ctx.config->extension_filters) {
    std::vector<std::string> ids = f->WouldSwap(head);
    if (std::find(ids.begin(), ids.end(), id) != ids.end()) return true;
  }
  return false;
}

CredentialUse WouldSwap(const Exchange& ex, size_t index) {
  return {WouldSwapInHeaders(ex, index), WouldSwapInBody(ex, index), WouldSwapInFilter(ex, index)};
}

Status CheckConsented(Exchange& ex, size_t index) {
  const vault::Credential& c = ex.ctx.config->credentials[index].credential;
  if (c.ask == vault::ConsentAsk::kOff) return OkStatus();
  if (std::find(ex.consent_decided.begin(), ex.consent_decided.end(), index) !=
      ex.consent_decided.end()) {
    return OkStatus();
  }
  ex.rec.consent.push_back({c.id, "refused", "swapped without a decision (fail closed)", 0, false});
  return ex.Refuse(403, "credential " + c.id + " was about to be used without the consent its "
                        "policy asks for; refused (run `cloister approve " +
                        ex.ctx.config->workspace + "`)");
}

Status CheckConsented(Exchange& ex, const std::string& credential) {
  const auto& creds = ex.ctx.config->credentials;
  for (size_t i = 0; i < creds.size(); ++i) {
    if (creds[i].credential.id == credential) return CheckConsented(ex, i);
  }
  return OkStatus();
}

}  // namespace cloister::proxy
