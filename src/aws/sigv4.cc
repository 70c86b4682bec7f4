#include "aws/sigv4.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/core_names.h>
#include <openssl/params.h>
#include <openssl/sha.h>

#include <algorithm>

#include "base/strings.h"

namespace cloister::aws {
namespace {

Error Corrupt(const std::string& what) { return Error(ErrorCode::kCorrupt, "SigV4: " + what); }

bool IsLowerHex(std::string_view s) {
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

bool AllOf(std::string_view s, bool (*pred)(char)) {
  for (char c : s) {
    if (!pred(c)) return false;
  }
  return true;
}

bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsKeyIdChar(char c) { return (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z'); }
bool IsScopeChar(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-'; }
bool IsHeaderNameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.';
}
bool IsMethodChar(char c) { return c >= 'A' && c <= 'Z'; }

bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    char x = a[i], y = b[i];
    if (x >= 'A' && x <= 'Z') x = static_cast<char>(x - 'A' + 'a');
    if (y >= 'A' && y <= 'Z') y = static_cast<char>(y - 'A' + 'a');
    if (x != y) return false;
  }
  return true;
}

struct QueryParam {
  std::string raw_key, raw_value;
  std::string key, value;  // decoded
};

// SECURITY: bounded split of the guest's query string.
Result<std::vector<QueryParam>> ParseQuery(std::string_view query) {
  std::vector<QueryParam> out;
  if (query.empty()) return out;
  for (const std::string& piece : Split(query, '&')) {
    if (piece.empty()) continue;
    if (out.size() >= kMaxQueryParams) return Corrupt("too many query parameters");
    QueryParam p;
    size_t eq = piece.find('=');
    p.raw_key = piece.substr(0, eq);
    p.raw_value = eq == std::string::npos ? "" : piece.substr(eq + 1);
    ASSIGN_OR_RETURN(p.key, UriDecode(p.raw_key));
    ASSIGN_OR_RETURN(p.value, UriDecode(p.raw_value));
    out.push_back(std::move(p));
  }
  return out;
}

std::pair<std::string_view, std::string_view> SplitTarget(std::string_view target) {
  size_t q = target.find('?');
  if (q == std::string_view::npos) return {target, {}};
  return {target.substr(0, q), target.substr(q + 1)};
}

Status ParseCredential(std::string_view cred, SigV4Auth* auth) {
  std::vector<std::string> parts = Split(cred, '/');
  if (parts.size() != 5) return Corrupt("Credential must be KEYID/DATE/REGION/SERVICE/aws4_request");
  if (parts[0].empty() || parts[0].size() > 128 || !AllOf(parts[0], IsKeyIdChar)) {
    return Corrupt("bad access key id in Credential");
  }
  if (parts[1].size() != 8 || !AllOf(parts[1], IsDigit)) return Corrupt("bad date in Credential");
  if (parts[2].empty() || parts[2].size() > 64 || !AllOf(parts[2], IsScopeChar)) {
    return Corrupt("bad region in Credential");
  }
  if (parts[3].empty() || parts[3].size() > 64 || !AllOf(parts[3], IsScopeChar)) {
    return Corrupt("bad service in Credential");
  }
  if (parts[4] != "aws4_request") return Corrupt("Credential scope must end in aws4_request");
  auth->access_key_id = parts[0];
  auth->date = parts[1];
  auth->region = parts[2];
  auth->service = parts[3];
  return OkStatus();
}

Status ParseSignedHeaders(std::string_view list, SigV4Auth* auth) {
  if (list.empty()) return Corrupt("empty SignedHeaders");
  std::vector<std::string> names = Split(list, ';');
  if (names.size() > kMaxSignedHeaders) return Corrupt("too many SignedHeaders");
  for (size_t i = 0; i < names.size(); ++i) {
    if (names[i].empty() || names[i].size() > 128 || !AllOf(names[i], IsHeaderNameChar)) {
      return Corrupt("bad name in SignedHeaders");
    }
    if (i > 0 && !(names[i - 1] < names[i])) return Corrupt("SignedHeaders not sorted and unique");
  }
  if (std::find(names.begin(), names.end(), "host") == names.end()) {
    return Corrupt("SignedHeaders must include host");
  }
  auth->signed_headers = std::move(names);
  return OkStatus();
}

Status CheckSignature(std::string_view sig) {
  if (sig.size() != 64 || !IsLowerHex(sig)) return Corrupt("Signature must be 64 lower-case hex digits");
  return OkStatus();
}

Status CheckAmzDate(std::string_view amz_date, const SigV4Auth& auth) {
  if (amz_date.size() != 16 || amz_date[8] != 'T' || amz_date[15] != 'Z' ||
      !AllOf(amz_date.substr(0, 8), IsDigit) || !AllOf(amz_date.substr(9, 6), IsDigit)) {
    return Corrupt("X-Amz-Date must be yyyymmddThhmmssZ");
  }
  if (amz_date.substr(0, 8) != auth.date) return Corrupt("X-Amz-Date does not match the scope date");
  return OkStatus();
}

Status CheckHeadBounds(const RequestHead& head) {
  if (head.method.empty() || head.method.size() > 32 || !AllOf(head.method, IsMethodChar)) {
    return Corrupt("bad method");
  }
  if (head.target.empty() || head.target[0] != '/' || head.target.size() > kMaxTarget) {
    return Corrupt("request target must be origin-form and at most 16 KiB");
  }
  if (head.headers.size() > kMaxHeaders) return Corrupt("too many headers");
  for (const Header& h : head.headers) {
    if (h.value.size() > kMaxHeaderValue || h.name.size() > 256) return Corrupt("header too long");
  }
  return OkStatus();
}

// Trims and collapses runs of spaces/tabs to one space (AWS canonical header values).
std::string CanonicalHeaderValue(std::string_view v) {
  std::string out;
  bool space = false;
  for (char c : v) {
    if (c == ' ' || c == '\t') {
      space = true;
      continue;
    }
    if (space && !out.empty()) out.push_back(' ');
    space = false;
    out.push_back(c);
  }
  return out;
}

// RFC 3986 5.2.4 plus removal of empty segments, as AWS's non-S3 services normalise paths.
std::string NormalizePath(std::string_view path) {
  if (path.empty()) return "/";
  std::vector<std::string> out;
  for (const std::string& seg : Split(path, '/')) {
    if (seg.empty() || seg == ".") continue;
    if (seg == "..") {
      if (!out.empty()) out.pop_back();
      continue;
    }
    out.push_back(seg);
  }
  std::string result = "/" + Join(out, "/");
  if (path.back() == '/' && !out.empty()) result += "/";
  return result;
}

}  // namespace

const std::string* RequestHead::Find(std::string_view name) const {
  for (const Header& h : headers) {
    if (EqualsIgnoreCase(h.name, name)) return &h.value;
  }
  return nullptr;
}

bool RequestHead::Set(std::string_view name, const std::string& value) {
  bool found = false;
  for (Header& h : headers) {
    if (EqualsIgnoreCase(h.name, name)) {
      h.value = value;
      found = true;
    }
  }
  return found;
}

std::string SigV4Auth::SignedHeadersString() const { return Join(signed_headers, ";"); }

bool LooksSigV4Signed(const RequestHead& head) {
  if (const std::string* a = head.Find("authorization")) return StartsWith(*a, "AWS4-");
  auto [path, query] = SplitTarget(head.target);
  return query.find("X-Amz-Signature=") != std::string_view::npos ||
         query.find("X-Amz-Algorithm=") != std::string_view::npos;
}

Result<SigV4Auth> ParseSigV4(const RequestHead& head) {
  RETURN_IF_ERROR(CheckHeadBounds(head));
  SigV4Auth auth;
  auto [path, query] = SplitTarget(head.target);
  ASSIGN_OR_RETURN(std::vector<QueryParam> params, ParseQuery(query));
  bool query_signed = false;
  for (const QueryParam& p : params) {
    if (p.key == "X-Amz-Signature" || p.key == "X-Amz-Algorithm") query_signed = true;
  }
  int auth_headers = 0;
  for (const Header& h : head.headers) auth_headers += EqualsIgnoreCase(h.name, "authorization");
  if (auth_headers > 1) return Corrupt("more than one Authorization header");
  const std::string* authz = head.Find("authorization");
  if (authz && query_signed) return Corrupt("signed in both the Authorization header and the query");

  if (authz) {
    auth.form = SigV4Auth::Form::kHeader;
    std::string_view v = *authz;
    if (!StartsWith(v, kAlgorithm) || v.size() == kAlgorithm.size() || v[kAlgorithm.size()] != ' ') {
      return Error(ErrorCode::kInvalidArgument,
                   "unsupported AWS signature scheme (only AWS4-HMAC-SHA256 is re-signed)");
    }
    v.remove_prefix(kAlgorithm.size() + 1);
    bool have_cred = false, have_sh = false, have_sig = false;
    for (const std::string& raw : Split(v, ',')) {
      std::string part = Trim(raw);
      size_t eq = part.find('=');
      if (eq == std::string::npos) return Corrupt("malformed Authorization component");
      std::string key = part.substr(0, eq), val = part.substr(eq + 1);
      if (key == "Credential" && !have_cred) {
        RETURN_IF_ERROR(ParseCredential(val, &auth));
        have_cred = true;
      } else if (key == "SignedHeaders" && !have_sh) {
        RETURN_IF_ERROR(ParseSignedHeaders(val, &auth));
        have_sh = true;
      } else if (key == "Signature" && !have_sig) {
        RETURN_IF_ERROR(CheckSignature(val));
        auth.signature = val;
        have_sig = true;
      } else {
        return Corrupt("unexpected or repeated Authorization component " + key.substr(0, 32));
      }
    }
    if (!have_cred || !have_sh || !have_sig) return Corrupt("Authorization lacks Credential, SignedHeaders or Signature");
    const std::string* date = head.Find("x-amz-date");
    if (!date) return Corrupt("X-Amz-Date header missing");
    auth.amz_date = *date;
    RETURN_IF_ERROR(CheckAmzDate(auth.amz_date, auth));
    if (const std::string* tok = head.Find("x-amz-security-token")) auth.security_token = *tok;
    return auth;
  }

  if (!query_signed) return Error(ErrorCode::kNotFound, "request is not SigV4-signed");
  auth.form = SigV4Auth::Form::kQuery;
  auto one = [&](std::string_view name, bool required) -> Result<std::string> {
    const QueryParam* found = nullptr;
    for (const QueryParam& p : params) {
      if (p.key == name) {
        if (found) return Corrupt("repeated query parameter " + std::string(name));
        found = &p;
      }
    }
    if (!found) {
      if (required) return Corrupt("query parameter " + std::string(name) + " missing");
      return std::string();
    }
    return found->value;
  };
  ASSIGN_OR_RETURN(std::string alg, one("X-Amz-Algorithm", true));
  if (alg != kAlgorithm) {
    return Error(ErrorCode::kInvalidArgument,
                 "unsupported AWS signature scheme (only AWS4-HMAC-SHA256 is re-signed)");
  }
  ASSIGN_OR_RETURN(std::string cred, one("X-Amz-Credential", true));
  RETURN_IF_ERROR(ParseCredential(cred, &auth));
  ASSIGN_OR_RETURN(std::string sh, one("X-Amz-SignedHeaders", true));
  RETURN_IF_ERROR(ParseSignedHeaders(sh, &auth));
  ASSIGN_OR_RETURN(auth.signature, one("X-Amz-Signature", true));
  RETURN_IF_ERROR(CheckSignature(auth.signature));
  ASSIGN_OR_RETURN(auth.amz_date, one("X-Amz-Date", true));
  RETURN_IF_ERROR(CheckAmzDate(auth.amz_date, auth));
  ASSIGN_OR_RETURN(auth.security_token, one("X-Amz-Security-Token", false));
  return auth;
}

Result<std::string> CanonicalRequest(const RequestHead& head, const SigV4Auth& auth,
                                     const CanonicalOptions& options) {
  RETURN_IF_ERROR(CheckHeadBounds(head));
  auto [path, query] = SplitTarget(head.target);
  std::string out = head.method + "\n";
  if (options.uri == UriMode::kAsIs) {
    out += path.empty() ? std::string("/") : std::string(path);
  } else {
    out += UriEncode(NormalizePath(path), /*keep_slash=*/true);
  }
  out += "\n";

  ASSIGN_OR_RETURN(std::vector<QueryParam> params, ParseQuery(query));
  std::vector<std::pair<std::string, std::string>> pairs;
  for (const QueryParam& p : params) {
    if (auth.form == SigV4Auth::Form::kQuery && p.key == "X-Amz-Signature") continue;
    if (options.query == QueryMode::kReencode) {
      pairs.emplace_back(UriEncode(p.key, false), UriEncode(p.value, false));
    } else {
      pairs.emplace_back(p.raw_key, p.raw_value);
    }
  }
  std::sort(pairs.begin(), pairs.end());
  for (size_t i = 0; i < pairs.size(); ++i) {
    if (i) out += "&";
    out += pairs[i].first + "=" + pairs[i].second;
  }
  out += "\n";

  for (const std::string& name : auth.signed_headers) {
    std::string joined;
    bool found = false;
    for (const Header& h : head.headers) {
      if (!EqualsIgnoreCase(h.name, name)) continue;
      if (found) joined += ",";
      joined += CanonicalHeaderValue(h.value);
      found = true;
    }
    if (!found) return Corrupt("signed header " + name + " is missing from the request");
    out += name + ":" + joined + "\n";
  }
  out += "\n" + auth.SignedHeadersString() + "\n" + options.payload_hash;
  return out;
}

std::string StringToSign(const SigV4Auth& auth, std::string_view canonical_request) {
  return std::string(kAlgorithm) + "\n" + auth.amz_date + "\n" + auth.Scope() + "\n" +
         Sha256Hex(canonical_request);
}

// OpenSSL 3 looks algorithms up by name on every one-shot call (SHA256(), HMAC()), which costs
// more than the hashing itself for request-sized inputs; fetch once, keep one context per thread.
namespace {

const EVP_MD* Sha256Md() {
  static EVP_MD* md = EVP_MD_fetch(nullptr, "SHA256", nullptr);
  return md;
}

EVP_MAC_CTX* HmacCtx() {
  struct Holder {
    EVP_MAC_CTX* ctx = nullptr;
    Holder() {
      static EVP_MAC* mac = EVP_MAC_fetch(nullptr, "HMAC", nullptr);
      ctx = EVP_MAC_CTX_new(mac);
      char digest[] = "SHA256";
      OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest, 0),
                             OSSL_PARAM_construct_end()};
      EVP_MAC_CTX_set_params(ctx, params);
    }
    ~Holder() { EVP_MAC_CTX_free(ctx); }
  };
  thread_local Holder holder;
  return holder.ctx;
}

EVP_MD_CTX* DigestCtx() {
  struct Holder {
    EVP_MD_CTX* ctx = EVP_MD_CTX_new();
    ~Holder() { EVP_MD_CTX_free(ctx); }
  };
  thread_local Holder holder;
  return holder.ctx;
}

}  // namespace

std::string Sha256(std::string_view data) {
  std::string out(SHA256_DIGEST_LENGTH, '\0');
  EVP_MD_CTX* ctx = DigestCtx();
  unsigned int len = 0;
  if (EVP_DigestInit_ex(ctx, Sha256Md(), nullptr) != 1 ||
      EVP_DigestUpdate(ctx, data.data(), data.size()) != 1 ||
      EVP_DigestFinal_ex(ctx, reinterpret_cast<unsigned char*>(out.data()), &len) != 1) {
    // Cannot happen with the default provider; a wrong digest fails every comparison (closed).
    return std::string(SHA256_DIGEST_LENGTH, '\0');
  }
  return out;
}

std::string Sha256Hex(std::string_view data) { return HexEncode(Sha256(data)); }

std::string HmacSha256(std::string_view key, std::string_view data) {
  std::string out(SHA256_DIGEST_LENGTH, '\0');
  EVP_MAC_CTX* ctx = HmacCtx();
  size_t len = 0;
  // A zero-length key is legal HMAC but OpenSSL wants a non-null pointer.
  static const unsigned char kEmpty = 0;
  const unsigned char* k = key.empty() ? &kEmpty : reinterpret_cast<const unsigned char*>(key.data());
  if (EVP_MAC_init(ctx, k, key.size(), nullptr) != 1 ||
      EVP_MAC_update(ctx, reinterpret_cast<const unsigned char*>(data.data()), data.size()) != 1 ||
      EVP_MAC_final(ctx, reinterpret_cast<unsigned char*>(out.data()), &len, out.size()) != 1) {
    return std::string(SHA256_DIGEST_LENGTH, '\0');
  }
  return out;
}

std::string SigningKey(std::string_view secret, std::string_view date, std::string_view region,
                       std::string_view service) {
  // SECURITY: `secret` is a real or placeholder AWS secret; the intermediate keys are wiped.
  std::string k = "AWS4" + std::string(secret);
  std::string k_date = HmacSha256(k, date);
  OPENSSL_cleanse(k.data(), k.size());
  std::string k_region = HmacSha256(k_date, region);
  std::string k_service = HmacSha256(k_region, service);
  std::string k_signing = HmacSha256(k_service, "aws4_request");
  OPENSSL_cleanse(k_date.data(), k_date.size());
  OPENSSL_cleanse(k_region.data(), k_region.size());
  OPENSSL_cleanse(k_service.data(), k_service.size());
  return k_signing;
}

std::string SignatureHex(std::string_view signing_key, std::string_view string_to_sign) {
  return HexEncode(HmacSha256(signing_key, string_to_sign));
}

bool ConstantTimeEquals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

std::string UriEncode(std::string_view s, bool keep_slash) {
  static const char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(s.size());
  for (unsigned char c : s) {
    if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
        c == '_' || c == '.' || c == '~' || (keep_slash && c == '/')) {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 15]);
    }
  }
  return out;
}

Result<std::string> UriDecode(std::string_view s) {
  auto hexval = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '%') {
      out.push_back(s[i]);
      continue;
    }
    if (i + 2 >= s.size()) return Corrupt("truncated percent escape");
    int hi = hexval(s[i + 1]), lo = hexval(s[i + 2]);
    if (hi < 0 || lo < 0) return Corrupt("bad percent escape");
    out.push_back(static_cast<char>(hi * 16 + lo));
    i += 2;
  }
  return out;
}

}  // namespace cloister::aws
