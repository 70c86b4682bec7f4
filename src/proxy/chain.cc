#include "proxy/chain.h"

#include "proxy/body_swap_filter.h"
#include "proxy/consent_filter.h"
#include "proxy/destination_filter.h"
#include "proxy/detection_filter.h"
#include "proxy/extension_filter_adapter.h"
#include "proxy/header_substitution_filter.h"
#include "proxy/hop_by_hop_filter.h"
#include "proxy/identity_encoding_filter.h"
#include "proxy/name_agreement_filter.h"
#include "proxy/response_redaction_filter.h"

namespace cloister::proxy {

Chain DefaultChain() {
  std::vector<std::unique_ptr<Filter>> f;
  // THE order of the proxy's filters (docs/design.md shows it). Requests go down this list,
  // responses come back up it.
  f.push_back(std::make_unique<DestinationFilter>());         // where to, egress policy, scope
  f.push_back(std::make_unique<DetectionFilter>());           // placeholders out of scope: 451
  f.push_back(std::make_unique<NameAgreementFilter>());       // CONNECT = SNI = Host, else 421
  f.push_back(std::make_unique<ConsentFilter>());             // ask-credentials: a grant, else 403
  f.push_back(std::make_unique<HeaderSubstitutionFilter>());  // placeholder -> real, headers
  f.push_back(std::make_unique<HopByHopFilter>());            // hop-by-hop headers, 100-continue
  // Responses: after the extension filters' response transforms (which take real tokens into
  // custody and must see them as sent), so what the guest finally gets is redacted.
  f.push_back(std::make_unique<ResponseRedactionFilter>());   // real -> placeholder, responses
  f.push_back(std::make_unique<ExtensionFilterAdapter>());    // config.extension_filters (AWS, OAuth)
  f.push_back(std::make_unique<BodySwapFilter>());            // placeholder -> real, bodies
  f.push_back(std::make_unique<IdentityEncodingFilter>());    // plain bytes back, or 502
  return Chain(std::move(f));
}

Status Chain::OnRequestHead(Exchange& ex) const {
  for (size_t i = ex.head_resume; i < filters_.size(); ++i) {
    RETURN_IF_ERROR(filters_[i]->OnRequestHead(ex));
    if (ex.consent_wait) {
      ex.head_resume = i;  // the driver waits for the decision, then calls again from here
      return OkStatus();
    }
  }
  return OkStatus();
}

Status Chain::OnRequestBody(Exchange& ex, std::string& data, bool end) const {
  for (const auto& f : filters_) RETURN_IF_ERROR(f->OnRequestBody(ex, data, end));
  return OkStatus();
}

Status Chain::OnResponseHead(Exchange& ex, ResponseHeader& res) const {
  for (auto it = filters_.rbegin(); it != filters_.rend(); ++it) {
    RETURN_IF_ERROR((*it)->OnResponseHead(ex, res));
  }
  return OkStatus();
}

Status Chain::OnResponseBody(Exchange& ex, ResponseHeader& res, std::string& data,
                             bool end) const {
  for (auto it = filters_.rbegin(); it != filters_.rend(); ++it) {
    RETURN_IF_ERROR((*it)->OnResponseBody(ex, res, data, end));
  }
  return OkStatus();
}

std::vector<std::string> Chain::Names() const {
  std::vector<std::string> out;
  for (const auto& f : filters_) out.push_back(f->name());
  return out;
}

}  // namespace cloister::proxy
