#include "proxy/response_redaction_filter.h"

namespace cloister::proxy {

Status ResponseRedactionFilter::OnResponseHead(Exchange& ex, ResponseHeader& res) {
  if (!ex.redactor.active()) return OkStatus();
  std::vector<std::pair<std::string, std::string>> fixed;
  for (const auto& f : res) {
    std::string v(f.value());
    std::string red = ex.redactor.Apply(v);
    if (red != v) fixed.push_back({std::string(f.name_string()), red});
    vault::SecureWipe(v);
  }
  for (const auto& [name, value] : fixed) res.set(name, value);
  return OkStatus();
}

Status ResponseRedactionFilter::OnResponseBody(Exchange& ex, ResponseHeader&, std::string& data,
                                               bool end) {
  if (!ex.redactor.active()) return OkStatus();
  ex.redactor.FeedInPlace(data, end);  // no real value is left in `data` (redactor.h)
  return OkStatus();
}

}  // namespace cloister::proxy
