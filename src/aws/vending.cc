#include "aws/vending.h"

#include <algorithm>
#include <cmath>
#include <set>

#include <nlohmann/json.hpp>

#include "aws/sigv4.h"
#include "base/strings.h"
#include "vault/crypto.h"

namespace cloister::aws {
namespace {

using nlohmann::json;

constexpr size_t kMaxXmlDepth = 32;
constexpr size_t kMaxXmlElements = 20000;
constexpr size_t kMaxXmlName = 128;
constexpr size_t kMaxJsonDepth = 64;

Error Refused(const std::string& what) {
  return Error(ErrorCode::kPermissionDenied, "AWS credential custody: " + what,
               "cloister keeps credentials that AWS mints on the host and gives the guest "
               "placeholders; what it cannot take into custody is refused "
               "(docs/threat-model.md: AWS credential custody)");
}

Error Malformed(const std::string& what) {
  return Error(ErrorCode::kCorrupt, "AWS credential custody: refused a response: " + what,
               "the response of a credential-vending AWS call could not be parsed, so it is not "
               "handed to the guest");
}

// ---- A bounded XML reader: the element tree with the byte span of each leaf's text.

struct XmlElement {
  std::string name;  // local name (namespace prefix dropped)
  int parent = -1;
  size_t text_begin = 0, text_end = 0;  // content span (leaf elements: their text)
  bool leaf = true;
};

bool NameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '-' || c == '.' || c == ':';
}

// SECURITY: guest-reachable bytes. Bounded (size, depth, element count, name length), no DTD,
// no CDATA; every malformed construct is an error.
Result<std::vector<XmlElement>> ParseXml(std::string_view s) {
  if (s.size() > kMaxVendingBody) return Malformed("body over 1 MiB");
  std::vector<XmlElement> out;
  std::vector<int> open;
  bool root_closed = false;
  size_t i = 0;
  while (i < s.size()) {
    if (s[i] != '<') {
      size_t lt = s.find('<', i);
      size_t end = lt == std::string_view::npos ? s.size() : lt;
      if (open.empty()) {
        for (size_t k = i; k < end; ++k) {
          if (!std::isspace(static_cast<unsigned char>(s[k]))) return Malformed("text outside the root element");
        }
      }
      i = end;
      continue;
    }
    std::string_view rest = s.substr(i);
    if (StartsWith(rest, "<?")) {
      size_t e = s.find("?>", i + 2);
      if (e == std::string_view::npos) return Malformed("unterminated processing instruction");
      i = e + 2;
      continue;
    }
    if (StartsWith(rest, "<!--")) {
      size_t e = s.find("-->", i + 4);
      if (e == std::string_view::npos) return Malformed("unterminated comment");
      i = e + 3;
      continue;
    }
    if (StartsWith(rest, "<!")) return Malformed("DTD or CDATA sections are not accepted");
    bool closing = StartsWith(rest, "</");
    size_t n = i + (closing ? 2 : 1);
    size_t name_start = n;
    while (n < s.size() && NameChar(s[n])) ++n;
    if (n == name_start || n - name_start > kMaxXmlName) return Malformed("bad element name");
    std::string qname(s.substr(name_start, n - name_start));
    std::string local = qname.substr(qname.rfind(':') == std::string::npos ? 0 : qname.rfind(':') + 1);
    // To the end of the tag, respecting quoted attribute values.
    char quote = 0;
    size_t e = n;
    for (; e < s.size(); ++e) {
      char c = s[e];
      if (quote) {
        if (c == quote) quote = 0;
      } else if (c == '"' || c == '\'') {
        quote = c;
      } else if (c == '<') {
        return Malformed("'<' inside a tag");
      } else if (c == '>') {
        break;
      }
    }
    if (e >= s.size()) return Malformed("unterminated tag");
    bool self_closing = !closing && e > n && s[e - 1] == '/';
    if (closing) {
      if (open.empty() || out[static_cast<size_t>(open.back())].name != local) {
        return Malformed("mismatched end tag </" + local.substr(0, 64) + ">");
      }
      XmlElement& el = out[static_cast<size_t>(open.back())];
      el.text_end = i;
      open.pop_back();
      if (open.empty()) root_closed = true;
    } else {
      if (root_closed) return Malformed("a second root element");
      if (out.size() >= kMaxXmlElements) return Malformed("too many elements");
      if (open.size() >= kMaxXmlDepth) return Malformed("nested too deep");
      XmlElement el;
      el.name = local;
      el.parent = open.empty() ? -1 : open.back();
      if (el.parent >= 0) out[static_cast<size_t>(el.parent)].leaf = false;
      el.text_begin = el.text_end = e + 1;
      out.push_back(std::move(el));
      if (!self_closing) {
        open.push_back(static_cast<int>(out.size() - 1));
      } else if (out.size() == 1) {
        root_closed = true;
      }
    }
    i = e + 1;
  }
  if (!open.empty()) return Malformed("unterminated element <" + out[static_cast<size_t>(open.back())].name.substr(0, 64) + ">");
  if (out.empty()) return Malformed("no root element");
  return out;
}

// The root element's local name, reading no further than its start tag.
Result<std::string> XmlRootName(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    if (std::isspace(static_cast<unsigned char>(s[i]))) {
      ++i;
      continue;
    }
    std::string_view rest = s.substr(i);
    if (StartsWith(rest, "<?")) {
      size_t e = s.find("?>", i);
      if (e == std::string_view::npos) break;
      i = e + 2;
    } else if (StartsWith(rest, "<!--")) {
      size_t e = s.find("-->", i);
      if (e == std::string_view::npos) break;
      i = e + 3;
    } else if (rest.size() > 1 && rest[0] == '<' && rest[1] != '!' && rest[1] != '/') {
      size_t n = 1;
      while (n < rest.size() && n <= kMaxXmlName && NameChar(rest[n])) ++n;
      std::string q(rest.substr(1, n - 1));
      if (q.empty()) break;
      return q.substr(q.rfind(':') == std::string::npos ? 0 : q.rfind(':') + 1);
    } else {
      break;
    }
  }
  return Malformed("not an XML document");
}

// Element names that carry a secret in AWS's XML APIs.
const std::set<std::string, std::less<>>& XmlSecretNames() {
  static const std::set<std::string, std::less<>> names = {
      "SecretAccessKey", "SessionToken", "Password", "ServicePassword", "Base32StringSeed",
      "QRCodePNG", "PrivateKey"};
  return names;
}

// True when `s` has an element start tag of one of XmlSecretNames() (prefixed or not).
bool XmlMentionsSecret(std::string_view s) {
  for (const std::string& n : XmlSecretNames()) {
    for (size_t p = s.find(n); p != std::string_view::npos; p = s.find(n, p + 1)) {
      size_t after = p + n.size();
      bool end_ok = after < s.size() && (s[after] == '>' || s[after] == '/' ||
                                         std::isspace(static_cast<unsigned char>(s[after])));
      bool start_ok = p > 0 && (s[p - 1] == '<' || s[p - 1] == ':');
      if (start_ok && end_ok) return true;
    }
  }
  return false;
}

struct Replacement {
  size_t begin, end;
  std::string with;
};

std::string ApplyReplacements(std::string_view body, std::vector<Replacement> r) {
  std::sort(r.begin(), r.end(), [](const Replacement& a, const Replacement& b) { return a.begin < b.begin; });
  std::string out;
  out.reserve(body.size());
  size_t pos = 0;
  for (const Replacement& x : r) {
    out.append(body.substr(pos, x.begin - pos));
    out.append(x.with);
    pos = x.end;
  }
  out.append(body.substr(pos));
  return out;
}

std::string Describe(const std::string& kind, const MintedPlaceholders& p, int64_t expires) {
  std::string id = p.access_key_id.empty() ? "token " + p.token.substr(0, 16) + "..." : p.access_key_id;
  return kind + " " + id + (expires ? " until " + FormatIso8601(expires) : " (no expiry: until the VM stops)");
}

// The SECURITY net behind every rewrite: no real minted value may remain in what the guest gets.
Status CheckNoRealValue(std::string_view out, const std::vector<std::string>& reals) {
  for (const std::string& r : reals) {
    if (!r.empty() && out.find(r) != std::string_view::npos) {
      return Refused("a minted value is still in the response after its replacement");
    }
  }
  return OkStatus();
}

const std::set<std::string, std::less<>> kStsVending = {
    "GetSessionToken", "GetFederationToken", "AssumeRole", "AssumeRoleWithWebIdentity",
    "AssumeRoleWithSAML", "AssumeRoot"};
const std::set<std::string, std::less<>> kStsPassing = {"GetCallerIdentity", "GetAccessKeyInfo",
                                                        "DecodeAuthorizationMessage"};
const std::set<std::string, std::less<>> kIamRefused = {
    "CreateLoginProfile", "UpdateLoginProfile", "CreateServiceSpecificCredential",
    "ResetServiceSpecificCredential", "CreateVirtualMFADevice"};

// STS / IAM XML: `block` elements (Credentials, AccessKey) holding the minted values.
Result<std::string> XmlCustody(const VendingCall& call, std::string_view body,
                               const std::string& action, CredentialCustody& custody,
                               CustodyOutcome* outcome) {
  const bool sts = call.service == VendingService::kSts;
  const std::string block = sts ? "Credentials" : "AccessKey";
  ASSIGN_OR_RETURN(std::vector<XmlElement> els, ParseXml(body));
  std::vector<Replacement> repl;
  std::vector<std::string> reals;
  std::set<size_t> covered;
  struct Found {
    MintedValues v;
    int id, secret, token;
  };
  std::vector<Found> found;
  const std::string kind = std::string(VendingServiceName(call.service)) + ":" + action;
  for (size_t b = 0; b < els.size(); ++b) {
    if (els[b].name != block) continue;
    int id = -1, secret = -1, token = -1, expiration = -1;
    for (size_t c = b + 1; c < els.size(); ++c) {
      if (els[c].parent != static_cast<int>(b)) continue;
      int* slot = els[c].name == "AccessKeyId" ? &id : els[c].name == "SecretAccessKey" ? &secret
                  : els[c].name == "SessionToken" ? &token : els[c].name == "Expiration" ? &expiration
                  : nullptr;
      if (!slot) continue;
      if (*slot >= 0) return Refused(kind + ": <" + block + "> has two <" + els[c].name + ">");
      if (!els[c].leaf) return Refused(kind + ": <" + els[c].name + "> is not a plain value");
      *slot = static_cast<int>(c);
    }
    auto text = [&](int k) {
      const XmlElement& e = els[static_cast<size_t>(k)];
      return Trim(body.substr(e.text_begin, e.text_end - e.text_begin));
    };
    if (id < 0 || secret < 0 || (sts && (token < 0 || expiration < 0))) {
      return Refused(kind + ": <" + block + "> lacks a key id, secret" +
                     (sts ? ", session token or expiration" : ""));
    }
    MintedValues v;
    v.kind = kind;
    v.access_key_id = text(id);
    v.secret = text(secret);
    if (token >= 0) v.session_token = text(token);
    for (const std::string* f : {&v.access_key_id, &v.secret, &v.session_token}) {
      if (f->find('&') != std::string::npos) return Refused(kind + ": an entity inside a credential value");
    }
    if (expiration >= 0) {
      ASSIGN_OR_RETURN(v.expires_unix, ParseIso8601(text(expiration)));
    }
    reals.insert(reals.end(), {v.access_key_id, v.secret, v.session_token});
    found.push_back({std::move(v), id, secret, token});
    for (int k : {id, secret, token}) {
      if (k >= 0) covered.insert(static_cast<size_t>(k));
    }
  }
  // SECURITY: no secret-bearing element may be left outside what is replaced; checked before
  // anything is taken into custody.
  for (size_t k = 0; k < els.size(); ++k) {
    if (XmlSecretNames().count(els[k].name) && !covered.count(k)) {
      return Refused(kind + ": the response carries <" + els[k].name +
                     "> in a place cloister cannot take into custody");
    }
  }
  {
    // SECURITY: a minted value anywhere else in the document (echoed in another element) would
    // reach the guest: refused before anything is taken into custody.
    std::vector<Replacement> blank;
    for (const Found& f : found) {
      for (int k : {f.id, f.secret, f.token}) {
        if (k >= 0) blank.push_back({els[static_cast<size_t>(k)].text_begin, els[static_cast<size_t>(k)].text_end, ""});
      }
    }
    RETURN_IF_ERROR(CheckNoRealValue(ApplyReplacements(body, std::move(blank)), reals));
  }
  for (Found& f : found) {
    int64_t expires = f.v.expires_unix;
    ASSIGN_OR_RETURN(MintedPlaceholders p, custody.Add(std::move(f.v)));
    auto put = [&](int k, const std::string& with) {
      const XmlElement& e = els[static_cast<size_t>(k)];
      repl.push_back({e.text_begin, e.text_end, with});
    };
    put(f.id, p.access_key_id);
    put(f.secret, p.secret);
    if (f.token >= 0) put(f.token, p.session_token);
    if (outcome) outcome->minted.push_back(Describe(kind, p, expires));
  }
  if (repl.empty()) return Refused(kind + ": no <" + block + "> in the response");
  std::string out = ApplyReplacements(body, std::move(repl));
  RETURN_IF_ERROR(CheckNoRealValue(out, reals));
  return out;
}

// SECURITY: nesting bound before nlohmann parses (its parser recurses per level).
Result<json> ParseJsonBounded(std::string_view body) {
  if (body.size() > kMaxVendingBody) return Malformed("body over 1 MiB");
  size_t depth = 0;
  bool in_str = false, esc = false;
  for (char c : body) {
    if (in_str) {
      if (esc) esc = false;
      else if (c == '\\') esc = true;
      else if (c == '"') in_str = false;
    } else if (c == '"') {
      in_str = true;
    } else if (c == '{' || c == '[') {
      if (++depth > kMaxJsonDepth) return Malformed("JSON nested too deep");
    } else if (c == '}' || c == ']') {
      if (depth > 0) --depth;
    }
  }
  json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Malformed("not JSON");
  return j;
}

const std::set<std::string, std::less<>>& JsonSecretKeys() {
  static const std::set<std::string, std::less<>> keys = {
      "SecretAccessKey", "secretAccessKey", "SecretKey", "secretKey", "SessionToken",
      "sessionToken", "authorizationToken", "AuthorizationToken", "Token", "token",
      "accessToken", "refreshToken", "Password", "password"};
  return keys;
}

bool JsonMentionsSecret(const json& j) {
  if (j.is_object()) {
    for (auto it = j.begin(); it != j.end(); ++it) {
      if (JsonSecretKeys().count(it.key())) return true;
      if (JsonMentionsSecret(it.value())) return true;
    }
  } else if (j.is_array()) {
    for (const json& x : j) {
      if (JsonMentionsSecret(x)) return true;
    }
  }
  return false;
}

const json* Field(const json& obj, std::initializer_list<const char*> names) {
  for (const char* n : names) {
    auto it = obj.find(n);
    if (it != obj.end()) return &*it;
  }
  return nullptr;
}

// Expiry as AWS JSON APIs send it: epoch seconds (SSO: milliseconds) or an ISO 8601 string.
Result<int64_t> JsonTime(const json* v, const std::string& kind) {
  if (!v) return Refused(kind + ": no expiration in the response");
  if (v->is_number()) {
    double d = v->get<double>();
    if (!std::isfinite(d) || d <= 0 || d > 1e15) return Refused(kind + ": bad expiration");
    if (d > 1e11) d /= 1000;  // milliseconds
    return static_cast<int64_t>(d);
  }
  if (v->is_string()) return ParseIso8601(v->get<std::string>());
  return Refused(kind + ": bad expiration");
}

Result<std::string> StringField(const json* v, const std::string& kind, const char* what) {
  if (!v || !v->is_string()) return Refused(kind + ": " + what + " is missing or not a string");
  return v->get<std::string>();
}

// Every object with a secret key field (STS JSON, SSO roleCredentials, Cognito Credentials).
Status JsonKeyCustody(json& j, const std::string& kind, CredentialCustody& custody,
                      CustodyOutcome* outcome, std::vector<std::string>& reals, int& found) {
  if (j.is_array()) {
    for (json& x : j) RETURN_IF_ERROR(JsonKeyCustody(x, kind, custody, outcome, reals, found));
    return OkStatus();
  }
  if (!j.is_object()) return OkStatus();
  const char* secret_names[] = {"SecretAccessKey", "secretAccessKey", "SecretKey", "secretKey"};
  const char* secret_name = nullptr;
  for (const char* n : secret_names) {
    if (j.contains(n)) secret_name = n;
  }
  if (secret_name) {
    const char* id_name = j.contains("AccessKeyId") ? "AccessKeyId" : "accessKeyId";
    const char* token_name = j.contains("SessionToken") ? "SessionToken" : "sessionToken";
    MintedValues v;
    v.kind = kind;
    ASSIGN_OR_RETURN(v.access_key_id, StringField(Field(j, {id_name}), kind, "the access key id"));
    ASSIGN_OR_RETURN(v.secret, StringField(Field(j, {secret_name}), kind, "the secret"));
    ASSIGN_OR_RETURN(v.session_token, StringField(Field(j, {token_name}), kind, "the session token"));
    ASSIGN_OR_RETURN(v.expires_unix, JsonTime(Field(j, {"Expiration", "expiration"}), kind));
    reals.insert(reals.end(), {v.access_key_id, v.secret, v.session_token});
    int64_t expires = v.expires_unix;
    ASSIGN_OR_RETURN(MintedPlaceholders p, custody.Add(std::move(v)));
    j[id_name] = p.access_key_id;
    j[secret_name] = p.secret;
    j[token_name] = p.session_token;
    if (outcome) outcome->minted.push_back(Describe(kind, p, expires));
    ++found;
  }
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (secret_name && it.key() == secret_name) continue;
    RETURN_IF_ERROR(JsonKeyCustody(it.value(), kind, custody, outcome, reals, found));
  }
  return OkStatus();
}

// Hosts a token may be put back for: ECR's proxyEndpoint host, CodeArtifact's repository
// endpoints in the region of the call.
Result<std::string> EndpointHost(const std::string& url, const std::string& kind) {
  std::string h = url;
  if (StartsWith(h, "https://")) h = h.substr(8);
  h = h.substr(0, h.find_first_of("/:"));
  h = ToLower(h);
  if (h.empty() || h.size() > 253 || !EndsWith(h, ".amazonaws.com") ||
      h.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789.-") != std::string::npos) {
    return Refused(kind + ": the registry endpoint is not an amazonaws.com host");
  }
  return h;
}

Result<std::string> JsonCustody(const VendingCall& call, std::string_view body,
                                CredentialCustody& custody, CustodyOutcome* outcome) {
  const std::string kind = std::string(VendingServiceName(call.service)) + ":" + call.action;
  ASSIGN_OR_RETURN(json j, ParseJsonBounded(body));
  std::vector<std::string> reals;
  int found = 0;
  if (call.service == VendingService::kEcr || call.service == VendingService::kEcrPublic) {
    json* data = j.is_object() && j.contains("authorizationData") ? &j["authorizationData"] : nullptr;
    if (!data) return Refused(kind + ": no authorizationData in the response");
    std::vector<json*> items;
    if (data->is_array()) {
      for (json& x : *data) items.push_back(&x);
    } else {
      items.push_back(data);
    }
    for (json* item : items) {
      if (!item->is_object()) return Refused(kind + ": authorizationData is not an object");
      ASSIGN_OR_RETURN(std::string b64, StringField(Field(*item, {"authorizationToken"}), kind, "authorizationToken"));
      auto decoded = vault::Base64Decode(b64);
      if (!decoded.ok() || !StartsWith(*decoded, "AWS:")) {
        return Refused(kind + ": the authorization token is not base64 of \"AWS:password\"");
      }
      MintedValues v;
      v.kind = kind;
      v.token = decoded->substr(4);
      if (call.service == VendingService::kEcrPublic) {
        v.token_hosts = {"public.ecr.aws"};
      } else {
        ASSIGN_OR_RETURN(std::string url, StringField(Field(*item, {"proxyEndpoint"}), kind, "proxyEndpoint"));
        ASSIGN_OR_RETURN(std::string h, EndpointHost(url, kind));
        v.token_hosts = {h};
      }
      ASSIGN_OR_RETURN(v.expires_unix, JsonTime(Field(*item, {"expiresAt"}), kind));
      reals.insert(reals.end(), {v.token, b64});
      int64_t expires = v.expires_unix;
      ASSIGN_OR_RETURN(MintedPlaceholders p, custody.Add(std::move(v)));
      (*item)["authorizationToken"] = vault::Base64Encode("AWS:" + p.token);
      if (outcome) outcome->minted.push_back(Describe(kind, p, expires));
      ++found;
    }
  } else if (call.service == VendingService::kCodeArtifact) {
    if (!j.is_object()) return Refused(kind + ": the response is not an object");
    MintedValues v;
    v.kind = kind;
    ASSIGN_OR_RETURN(v.token, StringField(Field(j, {"authorizationToken"}), kind, "authorizationToken"));
    ASSIGN_OR_RETURN(v.expires_unix, JsonTime(Field(j, {"expiration"}), kind));
    // codeartifact.REGION.amazonaws.com -> the repository endpoints DOMAIN-OWNER.d.codeartifact.REGION...
    v.token_hosts = {"d." + call.host};
    reals.push_back(v.token);
    int64_t expires = v.expires_unix;
    ASSIGN_OR_RETURN(MintedPlaceholders p, custody.Add(std::move(v)));
    j["authorizationToken"] = p.token;
    if (outcome) outcome->minted.push_back(Describe(kind, p, expires));
    ++found;
  } else {
    RETURN_IF_ERROR(JsonKeyCustody(j, kind, custody, outcome, reals, found));
  }
  if (found == 0) return Refused(kind + ": no credentials found in the response");
  // SECURITY: what remains must hold no other secret-like field (checked on the rewritten tree:
  // the replaced fields are placeholders now, so look for real values instead).
  std::string out = j.dump();
  RETURN_IF_ERROR(CheckNoRealValue(out, reals));
  return out;
}

}  // namespace

const char* VendingServiceName(VendingService s) {
  switch (s) {
    case VendingService::kNone: return "none";
    case VendingService::kSts: return "sts";
    case VendingService::kIam: return "iam";
    case VendingService::kSso: return "sso";
    case VendingService::kEcr: return "ecr";
    case VendingService::kEcrPublic: return "ecr-public";
    case VendingService::kCodeArtifact: return "codeartifact";
    case VendingService::kCognito: return "cognito-identity";
  }
  return "none";
}

VendingService ServiceOf(std::string_view host, std::string_view sigv4_service) {
  if (sigv4_service == "sts") return VendingService::kSts;
  if (sigv4_service == "iam") return VendingService::kIam;
  if (sigv4_service == "ecr") return VendingService::kEcr;
  if (sigv4_service == "ecr-public") return VendingService::kEcrPublic;
  if (sigv4_service == "codeartifact") return VendingService::kCodeArtifact;
  if (sigv4_service == "cognito-identity") return VendingService::kCognito;
  if (sigv4_service == "awsssoportal") return VendingService::kSso;
  if (!EndsWith(host, ".amazonaws.com") && !EndsWith(host, ".amazonaws.com.cn")) {
    return VendingService::kNone;
  }
  std::vector<std::string> labels = Split(host, '.');
  // VPC endpoints: vpce-ID.SERVICE.REGION.vpce.amazonaws.com (and -az forms).
  size_t first = (labels.size() > 1 && StartsWith(labels[0], "vpce-")) ? 1 : 0;
  const std::string& l = labels[first];
  const std::string next = labels.size() > first + 1 ? labels[first + 1] : "";
  if (l == "sts" || l == "sts-fips") return VendingService::kSts;
  if (l == "iam" || l == "iam-fips") return VendingService::kIam;
  if (l == "cognito-identity" || l == "cognito-identity-fips") return VendingService::kCognito;
  if (l == "codeartifact") return VendingService::kCodeArtifact;
  if ((l == "api" && next == "ecr") || l == "ecr" || l == "ecr-fips") return VendingService::kEcr;
  if (l == "api" && next == "ecr-public") return VendingService::kEcrPublic;
  if (l == "ecr-public") return VendingService::kEcrPublic;
  if (l == "portal" && next == "sso") return VendingService::kSso;
  return VendingService::kNone;
}

Status CheckAction(const VendingCall& call) {
  const std::string& a = call.action;
  if (a.empty()) return OkStatus();
  const std::string kind = std::string(VendingServiceName(call.service)) + ":" + a;
  switch (call.service) {
    case VendingService::kSts:
      if (kStsVending.count(a) || kStsPassing.count(a)) return OkStatus();
      return Refused("refused " + kind + ": an STS action cloister does not know may mint "
                     "credentials it cannot take into custody");
    case VendingService::kIam:
      if (kIamRefused.count(a)) {
        return Refused("refused " + kind + ": it creates a secret (a password or service "
                       "credential) the guest would know or cloister cannot replace");
      }
      return OkStatus();
    case VendingService::kCognito:
      if (a == "GetOpenIdToken" || a == "GetOpenIdTokenForDeveloperIdentity") {
        return Refused("refused " + kind + ": it mints an OpenID token usable from anywhere, "
                       "which cloister cannot take into custody (use GetCredentialsForIdentity)");
      }
      return OkStatus();
    default:
      return OkStatus();
  }
}

Result<std::string> QueryAction(std::string_view form) {
  if (form.size() > kMaxFullBody) return Malformed("form body over 8 MiB");
  std::string action;
  int seen = 0;
  for (const std::string& piece : Split(form, '&')) {
    size_t eq = piece.find('=');
    std::string k = piece.substr(0, eq);
    if (k != "Action") continue;
    std::string raw = eq == std::string::npos ? "" : piece.substr(eq + 1);
    for (char& c : raw) {
      if (c == '+') c = ' ';
    }
    ASSIGN_OR_RETURN(action, UriDecode(raw));
    ++seen;
  }
  // SECURITY: two Action parameters could be read differently here and at AWS.
  if (seen > 1) return Malformed("more than one Action parameter");
  if (action.size() > 128 || action.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789") != std::string::npos) {
    return Malformed("bad Action parameter");
  }
  return action;
}

Result<std::string> TakeIntoCustody(const VendingCall& call, std::string_view body,
                                    CredentialCustody& custody, CustodyOutcome* outcome) {
  if (body.size() > kMaxVendingBody) return Malformed("body over 1 MiB");
  switch (call.service) {
    case VendingService::kSts:
    case VendingService::kIam: {
      std::string_view t = body.substr(0, std::min<size_t>(body.size(), 64));
      std::string trimmed = Trim(t);
      if (!trimmed.empty() && trimmed[0] == '{') {
        // JSON protocol (awsJson): the action comes from the request's X-Amz-Target.
        VendingCall c = call;
        if (c.action.empty()) return Refused("a JSON response to an unnamed action");
        RETURN_IF_ERROR(CheckAction(c));
        bool vending = call.service == VendingService::kSts ? kStsVending.count(c.action) > 0
                                                            : c.action == "CreateAccessKey";
        if (vending) return JsonCustody(c, body, custody, outcome);
        ASSIGN_OR_RETURN(json j, ParseJsonBounded(body));
        if (JsonMentionsSecret(j)) {
          return Refused(std::string(VendingServiceName(c.service)) + ":" + c.action +
                         ": the response carries a secret cloister cannot take into custody");
        }
        return std::string(body);
      }
      if (Trim(body).empty()) return std::string(body);
      ASSIGN_OR_RETURN(std::string root, XmlRootName(body));
      std::string action = root;
      if (EndsWith(action, "Response")) action.resize(action.size() - 8);
      if (outcome) outcome->action = action;
      if (root == "ErrorResponse" || root == "Error") {
        if (XmlMentionsSecret(body)) return Refused("an error response carries a secret element");
        return std::string(body);
      }
      VendingCall c = call;
      c.action = action;
      RETURN_IF_ERROR(CheckAction(c));
      bool vending = call.service == VendingService::kSts ? kStsVending.count(action) > 0
                                                          : action == "CreateAccessKey";
      if (vending) return XmlCustody(call, body, action, custody, outcome);
      // SECURITY: a passing action's response must not carry a secret element at all.
      if (XmlMentionsSecret(body)) {
        return Refused(std::string(VendingServiceName(call.service)) + ":" + action +
                       ": the response carries a secret element cloister cannot take into custody");
      }
      return std::string(body);
    }
    case VendingService::kSso:
    case VendingService::kEcr:
    case VendingService::kEcrPublic:
    case VendingService::kCodeArtifact:
    case VendingService::kCognito: {
      if (outcome) outcome->action = call.action;
      RETURN_IF_ERROR(CheckAction(call));
      bool vending = (call.service == VendingService::kSso && call.action == "GetRoleCredentials") ||
                     (call.service == VendingService::kCognito && call.action == "GetCredentialsForIdentity") ||
                     ((call.service == VendingService::kEcr || call.service == VendingService::kEcrPublic ||
                       call.service == VendingService::kCodeArtifact) &&
                      call.action == "GetAuthorizationToken");
      if (vending) return JsonCustody(call, body, custody, outcome);
      if (Trim(body).empty()) return std::string(body);
      ASSIGN_OR_RETURN(json j, ParseJsonBounded(body));
      if (JsonMentionsSecret(j)) {
        return Refused(std::string(VendingServiceName(call.service)) + ":" +
                       (call.action.empty() ? std::string("(unnamed action)") : call.action) +
                       ": the response carries a credential-like field cloister cannot take into custody");
      }
      return std::string(body);
    }
    case VendingService::kNone:
      return std::string(body);
  }
  return std::string(body);
}

}  // namespace cloister::aws
