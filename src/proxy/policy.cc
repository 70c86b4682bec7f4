#include "proxy/policy.h"

#include <algorithm>
#include <cctype>

#include "proxy/transparent.h"

namespace cloister::proxy {

using nlohmann::json;

namespace {

bool ValidDnsName(std::string_view h) {
  if (h.empty() || h.size() > 253) return false;
  size_t label = 0;
  for (size_t i = 0; i < h.size(); ++i) {
    char c = h[i];
    if (c == '.') {
      if (label == 0 || h[i - 1] == '-') return false;
      label = 0;
      continue;
    }
    bool ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
    if (!ok) return false;
    if (c == '-' && label == 0) return false;
    if (++label > 63) return false;
  }
  return label > 0 && h.back() != '-';
}

bool AllDigitsAndDots(std::string_view h) {
  return std::all_of(h.begin(), h.end(), [](char c) { return (c >= '0' && c <= '9') || c == '.'; });
}

}  // namespace

bool EgressRule::Matches(std::string_view h, uint16_t p) const {
  if (port != 0 && port != p) return false;
  if (host.size() > 2 && host[0] == '*' && host[1] == '.') {
    std::string_view suffix = std::string_view(host).substr(1);  // ".example.com"
    return h.size() > suffix.size() && h.substr(h.size() - suffix.size()) == suffix;
  }
  return h == host;
}

std::string EgressRule::ToString() const {
  return port == 0 ? host : host + ":" + std::to_string(port);
}

bool EgressPolicy::Allows(std::string_view host, uint16_t port) const {
  if (allow_all) return true;
  return std::any_of(allow.begin(), allow.end(),
                     [&](const EgressRule& r) { return r.Matches(host, port); });
}

bool EgressPolicy::AllowsOpaque(std::string_view host, uint16_t port) const {
  if (port == 80 || port == 443) return false;
  return std::any_of(allow.begin(), allow.end(), [&](const EgressRule& r) {
    return r.port == port && r.Matches(host, port);
  });
}

Result<EgressRule> ParseEgressRule(std::string_view text) {
  auto bad = [&](const std::string& why) {
    return Error(ErrorCode::kInvalidArgument,
                 "not an egress rule: '" + std::string(text.substr(0, 300)) + "' (" + why + ")",
                 "give host[:port]: api.example.com, *.example.com (its subdomains), 10.0.0.5:5432");
  };
  std::string s(text);
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  EgressRule r;
  size_t colon = s.find(':');
  if (colon != std::string::npos) {
    std::string p = s.substr(colon + 1);
    s.resize(colon);
    if (p.empty() || p.size() > 5 || p[0] == '0' ||
        !std::all_of(p.begin(), p.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      return bad("port");
    }
    int v = std::stoi(p);
    if (v < 1 || v > 65535) return bad("port out of range");
    r.port = static_cast<uint16_t>(v);
  }
  if (!s.empty() && s.back() == '.') s.pop_back();
  bool wildcard = s.size() > 2 && s[0] == '*' && s[1] == '.';
  std::string_view name = wildcard ? std::string_view(s).substr(2) : std::string_view(s);
  if (name.find('*') != std::string_view::npos) return bad("'*' only as a leading '*.'");
  if (AllDigitsAndDots(name)) {
    if (wildcard || !IsIpv4Literal(name)) return bad("not an IPv4 address");
  } else if (!ValidDnsName(name)) {
    return bad("not a host name");
  }
  r.host = s;
  return r;
}

Status ValidateEgressPolicy(const EgressPolicy& p) {
  if (p.allow.size() > kMaxEgressRules) {
    return Error(ErrorCode::kInvalidArgument, "too many egress rules (" +
                 std::to_string(p.allow.size()) + ", at most " + std::to_string(kMaxEgressRules) + ")");
  }
  for (const EgressRule& r : p.allow) {
    ASSIGN_OR_RETURN(EgressRule n, ParseEgressRule(r.ToString()));
    if (!(n == r)) {
      return Error(ErrorCode::kInvalidArgument, "egress rule '" + r.ToString() + "' is not normalised");
    }
  }
  return OkStatus();
}

json EgressPolicyToJson(const EgressPolicy& p) {
  json allow = json::array();
  for (const EgressRule& r : p.allow) allow.push_back(r.ToString());
  return {{"allow_all", p.allow_all}, {"allow", allow}};
}

Result<EgressPolicy> EgressPolicyFromJson(const json& doc) {
  auto bad = [](const std::string& why) {
    return Error(ErrorCode::kCorrupt, "config.json: \"egress\" " + why,
                 "fix it with `cloister egress NAME --reset`");
  };
  if (!doc.is_object()) return bad("is not an object");
  EgressPolicy p;
  if (auto it = doc.find("allow_all"); it != doc.end()) {
    if (!it->is_boolean()) return bad("allow_all is not a boolean");
    p.allow_all = it->get<bool>();
  }
  if (auto it = doc.find("allow"); it != doc.end()) {
    if (!it->is_array() || it->size() > kMaxEgressRules) return bad("allow is not a list of rules");
    for (const json& e : *it) {
      if (!e.is_string()) return bad("allow is not a list of rules");
      auto r = ParseEgressRule(e.get<std::string>());
      if (!r.ok()) return bad(r.error().message());
      p.allow.push_back(*r);
    }
  }
  return p;
}

const ConfigSection<EgressPolicy>& EgressPolicySection() {
  static const ConfigSection<EgressPolicy> section{kEgressPolicyConfigKey, EgressPolicyFromJson,
                                                   EgressPolicyToJson, ValidateEgressPolicy};
  return section;
}

Result<EgressPolicy> EgressPolicyFromConfig(const WorkspaceConfig& config) {
  return LoadConfigSection(EgressPolicySection(), config);
}

Status PutEgressPolicy(WorkspaceConfig& config, const EgressPolicy& policy) {
  return PutConfigSection(EgressPolicySection(), config, policy);
}

}  // namespace cloister::proxy
