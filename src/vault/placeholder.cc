#include "vault/placeholder.h"

#include <algorithm>
#include <array>
#include <nlohmann/json.hpp>

#include "base/strings.h"
#include "vault/crypto.h"

namespace cloister::vault {
namespace {

constexpr std::string_view kBase62 =
    "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
constexpr std::string_view kBase64Url =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

struct KnownPrefix {
  std::string_view prefix;
  std::string_view alphabet;  // empty: infer from the value (a format without known structure)
  bool github_checksum;
  bool fixed_separators = false;  // the format puts its punctuation at fixed positions
};

// Longest first within a family.
constexpr std::array<KnownPrefix, 17> kPrefixes = {{
    {"sk-ant-api03-", kBase64Url, false},
    {"sk-ant-admin01-", kBase64Url, false},
    {"sk-ant-oat01-", kBase64Url, false},
    {"sk-ant-ort01-", kBase64Url, false},
    {"sk-ant-", kBase64Url, false},
    {"sk-proj-", kBase64Url, false},
    {"sk-svcacct-", kBase64Url, false},
    {"sk-admin-", kBase64Url, false},
    {"sk-", "", false},
    {"ghp_", kBase62, true},
    {"gho_", kBase62, true},
    {"ghu_", kBase62, true},
    {"ghs_", kBase62, true},
    {"ghr_", kBase62, true},
    // github_pat_ + 22 base62 + '_' + 59 base62: the '_' is the format's, not the value's.
    {"github_pat_", "", false, true},
    {"glpat-", "", false},
    {"gldt-", "", false},
}};

bool IsAlnum(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

// Alphabet from the character classes present in `body`: digits, lower-case (only a-f if the
// value looks like lower-case hex), upper-case; plus, with `punctuation`, the set of other
// characters present (in byte order, so neither their positions nor their order matter).
std::string InferAlphabet(std::string_view body, bool punctuation) {
  bool digit = false, lower = false, upper = false, beyond_hex = false;
  bool other[256] = {};
  for (char c : body) {
    if (c >= '0' && c <= '9') digit = true;
    else if (c >= 'a' && c <= 'z') { lower = true; beyond_hex |= c > 'f'; }
    else if (c >= 'A' && c <= 'Z') upper = true;
    else other[static_cast<unsigned char>(c)] = true;
  }
  std::string a;
  if (digit) a += "0123456789";
  if (upper) a += "ABCDEFGHIJKLMNOPQRSTUVWXYZ";
  if (lower) a += (beyond_hex || upper || !digit) ? "abcdefghijklmnopqrstuvwxyz" : "abcdef";
  if (a.size() < 16) a = std::string(kBase62);  // too little to go on: base62
  if (punctuation) {
    for (int c = 0; c < 256; ++c) {
      if (other[c]) a += static_cast<char>(c);
    }
  }
  return a;
}

// Deterministic stream of alphabet characters (rejection sampling over HKDF blocks).
class CharStream {
 public:
  CharStream(std::string_view salt, std::string info, std::string_view alphabet)
      : salt_(salt), info_(std::move(info)), alphabet_(alphabet) {}

  Result<char> Next() {
    const size_t n = alphabet_.size();
    const unsigned limit = 256 - 256 % n;
    while (true) {
      if (pos_ >= block_.size()) {
        ASSIGN_OR_RETURN(block_, HkdfSha256(salt_, "cloister-placeholder-v1",
                                            info_ + '\0' + std::to_string(counter_++), 256));
        pos_ = 0;
      }
      unsigned b = static_cast<uint8_t>(block_[pos_++]);
      if (b < limit) return alphabet_[b % n];
    }
  }

 private:
  std::string_view salt_;
  std::string info_;
  std::string alphabet_;
  std::string block_;
  size_t pos_ = 0;
  uint32_t counter_ = 0;
};

}  // namespace

std::vector<std::string_view> KnownCredentialPrefixes() {
  std::vector<std::string_view> out;
  for (const KnownPrefix& k : kPrefixes) out.push_back(k.prefix);
  return out;
}

std::string_view JwtSignature(std::string_view jwt) {
  size_t a = jwt.find('.');
  if (a == std::string_view::npos) return {};
  size_t b = jwt.find('.', a + 1);
  if (b == std::string_view::npos) return {};
  return jwt.substr(b + 1);
}

Result<std::string> JwtPlaceholderSignature(std::string_view install_salt,
                                            std::string_view workspace, std::string_view id,
                                            size_t length) {
  if (install_salt.size() < 16) {
    return Error(ErrorCode::kFailedPrecondition, "placeholder salt is missing or too short");
  }
  length = std::max(length, kPlaceholderMarker.size() + kMinRandomChars);
  CharStream stream(install_salt, std::string(workspace) + '\0' + std::string(id) + "\0jwt",
                    kBase64Url);
  std::string out(kPlaceholderMarker);
  while (out.size() < length) {
    ASSIGN_OR_RETURN(char c, stream.Next());
    out += c;
  }
  return out;
}

Result<std::string> JwtPlaceholderFor(std::string_view real_jwt, std::string_view signature) {
  // SECURITY: `real_jwt` is a real token (from the provider or the host's credentials file); only
  // the listed public claims are copied out of it.
  auto bad = [] {
    return Error(ErrorCode::kInvalidArgument, "token is not a JWT (header.payload.signature)");
  };
  if (real_jwt.size() > 16384) return bad();
  size_t a = real_jwt.find('.');
  if (a == std::string_view::npos) return bad();
  size_t b = real_jwt.find('.', a + 1);
  if (b == std::string_view::npos || real_jwt.find('.', b + 1) != std::string_view::npos) {
    return bad();
  }
  std::string_view header_seg = real_jwt.substr(0, a);
  auto header = Base64Decode(header_seg);
  auto payload = Base64Decode(real_jwt.substr(a + 1, b - a - 1));
  if (!header.ok() || !payload.ok()) return bad();
  nlohmann::json h = nlohmann::json::parse(*header, nullptr, false);
  nlohmann::json p = nlohmann::json::parse(*payload, nullptr, false);
  SecureWipe(payload.value());
  if (!h.is_object() || !p.is_object()) return bad();
  static const char* kTop[] = {"exp", "iat", "nbf", "iss", "aud", "sub", "email",
                               "email_verified", "auth_time"};
  static const char* kAuth[] = {"chatgpt_plan_type", "chatgpt_account_id", "chatgpt_user_id",
                                "user_id", "chatgpt_account_is_fedramp",
                                "chatgpt_subscription_active_start",
                                "chatgpt_subscription_active_until"};
  static const char* kProfile[] = {"email", "email_verified"};
  nlohmann::json out = nlohmann::json::object();
  for (const char* k : kTop) {
    if (p.contains(k)) out[k] = p[k];
  }
  auto copy_group = [&](const char* group, const auto& keys) {
    if (!p.contains(group) || !p[group].is_object()) return;
    nlohmann::json g = nlohmann::json::object();
    for (const char* k : keys) {
      if (p[group].contains(k)) g[k] = p[group][k];
    }
    out[group] = std::move(g);
  };
  copy_group("https://api.openai.com/auth", kAuth);
  copy_group("https://api.openai.com/profile", kProfile);
  p.clear();
  return std::string(header_seg) + "." + Base64Encode(out.dump(), true, false) + "." +
         std::string(signature);
}

Result<std::string> MakeJwtPlaceholder(std::string_view install_salt, std::string_view workspace,
                                       std::string_view id, std::string_view real_jwt) {
  ASSIGN_OR_RETURN(std::string sig, JwtPlaceholderSignature(install_salt, workspace, id,
                                                            JwtSignature(real_jwt).size()));
  return JwtPlaceholderFor(real_jwt, sig);
}

std::string GithubChecksum(std::string_view body) {
  uint32_t crc = Crc32(body);
  std::string out;
  while (crc > 0) {
    out.insert(out.begin(), kBase62[crc % 62]);
    crc /= 62;
  }
  while (out.size() < 6) out.insert(out.begin(), '0');
  return out;
}

bool GithubChecksumValid(std::string_view token) {
  if (token.size() != 40 || token.substr(0, 2) != "gh" || token[3] != '_') return false;
  return GithubChecksum(token.substr(4, 30)) == token.substr(34);
}

Result<std::string> MakePlaceholder(std::string_view install_salt, std::string_view workspace,
                                    const Credential& cred) {
  if (install_salt.size() < 16) {
    return Error(ErrorCode::kFailedPrecondition, "placeholder salt is missing or too short");
  }
  const std::string_view value = cred.value;
  const KnownPrefix* known = nullptr;
  for (const KnownPrefix& k : kPrefixes) {
    if (StartsWith(value, k.prefix)) {
      known = &k;
      break;
    }
  }
  std::string prefix = known ? std::string(known->prefix) : "";
  std::string_view body = value.substr(prefix.size());
  // SECURITY (issue 15 item 9): a format without known structure keeps no position of the real
  // value: its punctuation joins the alphabet as a set, so the placeholder depends on the value
  // only through prefix, length and alphabet. Only formats whose separators are fixed by the
  // format itself (fixed_separators) keep them in place.
  bool keep_punctuation = known && known->fixed_separators;
  std::string alphabet = known && !known->alphabet.empty() ? std::string(known->alphabet)
                                                           : InferAlphabet(body, !keep_punctuation);
  bool checksum = known && known->github_checksum && value.size() == 40;

  // Template: for each body position, 0 = random, else the kept punctuation character.
  std::string tmpl(body.size(), '\0');
  if (keep_punctuation) {
    for (size_t i = 0; i < body.size(); ++i) {
      if (!IsAlnum(body[i])) tmpl[i] = body[i];
    }
  }
  if (checksum) tmpl.resize(30);  // the last 6 are computed
  // The marker goes right after the prefix when the alphabet can spell it and nothing is kept there.
  bool marker_fits = true;
  for (char c : kPlaceholderMarker) marker_fits &= alphabet.find(c) != std::string::npos;
  std::string lower_marker = ToLower(kPlaceholderMarker);
  std::string marker(kPlaceholderMarker);
  if (!marker_fits) {
    marker_fits = true;
    for (char c : lower_marker) marker_fits &= alphabet.find(c) != std::string::npos;
    marker = lower_marker;
  }
  if (!marker_fits) marker.clear();
  // Lengthen short values so the marker and kMinRandomChars random characters fit.
  size_t random_slots = 0;
  for (size_t i = marker.size(); i < tmpl.size(); ++i) random_slots += tmpl[i] == '\0';
  size_t need = marker.size() + kMinRandomChars;
  if (tmpl.size() < marker.size() || random_slots < kMinRandomChars) {
    size_t missing = tmpl.size() < marker.size() ? need - tmpl.size()
                                                 : kMinRandomChars - random_slots;
    tmpl.append(missing, '\0');
  }
  for (size_t i = 0; i < marker.size(); ++i) {
    if (tmpl[i] != '\0') { marker.clear(); break; }
  }

  CharStream stream(install_salt, std::string(workspace) + '\0' + cred.id, alphabet);
  std::string out = prefix;
  for (size_t i = 0; i < tmpl.size(); ++i) {
    if (i < marker.size()) {
      out += marker[i];
    } else if (tmpl[i] != '\0') {
      out += tmpl[i];
    } else {
      ASSIGN_OR_RETURN(char c, stream.Next());
      out += c;
    }
  }
  if (checksum) out += GithubChecksum(std::string_view(out).substr(prefix.size(), 30));
  return out;
}

}  // namespace cloister::vault
