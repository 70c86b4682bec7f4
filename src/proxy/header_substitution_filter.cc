#include "proxy/header_substitution_filter.h"

#include "base/strings.h"
#include "proxy/credential_use.h"
#include "vault/credential.h"
#include "vault/crypto.h"

namespace cloister::proxy {

std::optional<std::string> SubstituteInHeader(std::string_view value, std::string_view placeholder,
                                              std::string_view real) {
  if (placeholder.empty()) return std::nullopt;
  auto replace_all = [&](std::string s) -> std::optional<std::string> {
    bool found = false;
    for (size_t pos = s.find(placeholder); pos != std::string::npos;
         pos = s.find(placeholder, pos + real.size())) {
      s.replace(pos, placeholder.size(), real);
      found = true;
    }
    if (!found) return std::nullopt;
    return s;
  };
  if (auto direct = replace_all(std::string(value))) return direct;
  if (value.size() > 6 && ToLower(value.substr(0, 6)) == "basic ") {
    auto decoded = vault::Base64Decode(Trim(value.substr(6)));
    if (!decoded.ok()) return std::nullopt;
    auto swapped = replace_all(*decoded);
    vault::SecureWipe(decoded.value());
    if (!swapped) return std::nullopt;
    std::string out = std::string(value.substr(0, 6)) + vault::Base64Encode(*swapped);
    vault::SecureWipe(*swapped);
    return out;
  }
  return std::nullopt;
}

Status HeaderSubstitutionFilter::OnRequestHead(Exchange& ex) {
  if (!ex.origin.tls || !ex.names_agree) return OkStatus();  // never in clear text, nor astray
  for (size_t i : ex.in_scope) {
    const vault::Credential& c = ex.ctx.config->credentials[i].credential;
    const std::string& ph = ex.ctx.config->credentials[i].placeholder;
    if (!WouldSwapInHeaders(ex, i)) continue;  // credential_use.h: what consent asked about
    RETURN_IF_ERROR(CheckConsented(ex, i));
    std::vector<std::string> names = SubstitutedHeaders(c);
    bool swapped = false;
    for (const std::string& name : names) {
      std::vector<std::string> values;
      bool changed = false;
      auto range = ex.req.equal_range(name);
      for (auto it = range.first; it != range.second; ++it) {
        std::string_view v(it->value().data(), it->value().size());
        auto s = SubstituteInHeader(v, ph, c.value);
        changed |= s.has_value();
        values.push_back(s ? std::move(*s) : std::string(v));
      }
      if (!changed) continue;
      ex.req.erase(name);
      for (std::string& v : values) {
        ex.req.insert(name, v);
        vault::SecureWipe(v);
      }
      swapped = true;
    }
    if (swapped) {
      ex.redactor.Add(c.value, ph);
      ex.rec.swaps.push_back(c.id);
    }
  }
  return OkStatus();
}

}  // namespace cloister::proxy
