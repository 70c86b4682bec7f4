#include "proxy/detection_filter.h"

#include <algorithm>

#include "base/strings.h"
#include "vault/credential.h"

namespace cloister::proxy {
namespace {

void Classify(Exchange& ex, const std::vector<Hit>& hits, const std::string& where, bool body) {
  const ProxyConfig& config = *ex.ctx.config;
  for (const Hit& h : hits) {
    const vault::Credential& c = config.credentials[h.index].credential;
    bool in_scope = std::find(ex.in_scope.begin(), ex.in_scope.end(), h.index) != ex.in_scope.end();
    if (in_scope) continue;  // its own host: substituted (headers) or harmless
    LeakFlag flag{c.id, where, EncodingName(h.encoding), "blocked"};
    bool llm = body && config.llm_body_policy == vault::LlmBodyPolicy::kFlag &&
               std::all_of(ex.hosts.begin(), ex.hosts.end(),
                           [&](const std::string& host) { return ex.ctx.IsLlmHost(host); });
    if (llm) {
      flag.action = "flagged";
      bool dup = false;
      for (const LeakFlag& l : ex.rec.leaks) {
        dup |= l.credential == flag.credential && l.where == flag.where &&
               l.encoding == flag.encoding;
      }
      if (!dup) ex.rec.leaks.push_back(flag);
      continue;
    }
    ex.block.push_back(flag);
  }
}

}  // namespace

Status DetectionFilter::OnRequestHead(Exchange& ex) {
  const PlaceholderSet& set = *ex.ctx.placeholders;
  Classify(ex, set.Scan(ex.raw_target), "url", false);
  for (const auto& f : ex.req) {
    std::string_view v(f.value().data(), f.value().size());
    Classify(ex, set.Scan(v), "header:" + ToLower(f.name_string()), false);
  }
  return ex.block.empty() ? OkStatus() : ex.Trip();
}

Status DetectionFilter::OnRequestBody(Exchange& ex, std::string& data, bool) {
  if (!ex.scanner) ex.scanner = std::make_unique<StreamScanner>(*ex.ctx.placeholders);
  std::vector<Hit> hits;
  ex.scanner->Feed(data, hits);
  Classify(ex, hits, "body", true);
  return ex.block.empty() ? OkStatus() : ex.Trip();
}

}  // namespace cloister::proxy
