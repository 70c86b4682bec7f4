#include "aws/custody.h"

#include <openssl/crypto.h>

#include <algorithm>
#include <chrono>
#include <ctime>

#include "base/strings.h"
#include "vault/credential.h"
#include "vault/crypto.h"

namespace cloister::aws {
namespace {

constexpr std::string_view kBase32 = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";
constexpr std::string_view kAlnum = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
constexpr std::string_view kMarker = "CLOISTER";

bool AllIn(std::string_view s, std::string_view alphabet) {
  return std::all_of(s.begin(), s.end(), [&](char c) { return alphabet.find(c) != std::string_view::npos; });
}

Error Unsafe(const std::string& kind, const std::string& what) {
  return Error(ErrorCode::kInvalidArgument,
               "AWS credential custody: cannot take the credential minted by " + kind +
                   " into custody (" + what + "), so it is not handed to the guest",
               "cloister keeps credentials that AWS mints on the host and gives the guest "
               "placeholders; this one has a shape it cannot replace safely");
}

int64_t SystemNow() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

Result<std::shared_ptr<CredentialCustody>> CredentialCustody::Create(TraceFn trace, Clock clock) {
  std::shared_ptr<CredentialCustody> c(new CredentialCustody());
  ASSIGN_OR_RETURN(c->key_, vault::RandomBytes(32));
  c->trace_ = std::move(trace);
  c->clock_ = clock ? std::move(clock) : Clock(SystemNow);
  return c;
}

CredentialCustody::~CredentialCustody() {
  vault::SecureWipe(key_);
  for (auto& e : entries_) {
    vault::SecureWipe(e->real.secret);
    vault::SecureWipe(e->real.session_token);
    vault::SecureWipe(e->real.token);
  }
}

std::string CredentialCustody::Draw(std::string_view label, std::string_view value,
                                    std::string_view alphabet, size_t n) const {
  std::string out;
  out.reserve(n);
  const size_t m = alphabet.size();
  const unsigned limit = 256 - 256 % m;
  for (uint32_t counter = 0; out.size() < n; ++counter) {
    std::string msg(label);
    msg.push_back('\0');
    msg.append(value);
    msg.push_back('\0');
    msg.append(std::to_string(counter));
    std::string block = vault::HmacSha256(key_, msg);
    vault::SecureWipe(msg);
    for (unsigned char b : block) {
      if (out.size() == n) break;
      if (b < limit) out.push_back(alphabet[b % m]);
    }
  }
  return out;
}

void CredentialCustody::DropExpiredLocked(int64_t now) {
  for (auto it = entries_.begin(); it != entries_.end();) {
    Entry* e = it->get();
    if (e->real.expires_unix != 0 && e->real.expires_unix <= now) {
      by_key_id_.erase(e->guest.access_key_id);
      by_token_.erase(e->guest.token);
      vault::SecureWipe(e->real.secret);
      vault::SecureWipe(e->real.session_token);
      vault::SecureWipe(e->real.token);
      it = entries_.erase(it);
    } else {
      ++it;
    }
  }
}

Result<MintedPlaceholders> CredentialCustody::Add(MintedValues v) {
  const int64_t now = clock_();
  if (v.expires_unix != 0 && v.expires_unix <= now) {
    return Unsafe(v.kind, "it is already expired");
  }
  auto entry = std::make_unique<Entry>();
  MintedPlaceholders& g = entry->guest;
  const bool key = !v.access_key_id.empty();
  if (key) {
    // SECURITY: the shapes are checked so a placeholder of the same shape can stand in; anything
    // else is refused rather than passed.
    const std::string& id = v.access_key_id;
    if (id.size() < 16 || id.size() > 128 || !AllIn(id, "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789") ||
        !AllIn(id.substr(0, 4), "ABCDEFGHIJKLMNOPQRSTUVWXYZ")) {
      return Unsafe(v.kind, "the access key id is not AKIA/ASIA-shaped");
    }
    if (v.secret.size() < 16 || v.secret.size() > 128 ||
        !AllIn(v.secret, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=")) {
      return Unsafe(v.kind, "the secret access key is not a 16-128 character base64 string");
    }
    if (!v.session_token.empty() &&
        (v.session_token.size() < 16 || v.session_token.size() > kMaxMintedTokenLen ||
         !AllIn(v.session_token, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/="))) {
      return Unsafe(v.kind, "the session token is not a base64 string of at most 8 KiB");
    }
    if (!v.token.empty()) return Unsafe(v.kind, "a key credential with a token");
    // Derived from the key id (an identifier), never from the secret's or token's bytes.
    g.access_key_id = id.substr(0, 4) + Draw("key-id", id, kBase32, id.size() - 4);
    g.secret = std::string(kMarker) + Draw("secret", id, kAlnum, v.secret.size() - kMarker.size());
    if (!v.session_token.empty()) {
      g.session_token = std::string(kMarker) +
                        Draw("session-token", id, kAlnum, v.session_token.size() - kMarker.size());
    }
  } else {
    if (v.token.size() < 16 || v.token.size() > kMaxMintedTokenLen ||
        !AllIn(v.token, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=._-")) {
      return Unsafe(v.kind, "the token is not a base64/JWT-like string of 16 bytes to 8 KiB");
    }
    if (!v.secret.empty() || !v.session_token.empty()) return Unsafe(v.kind, "a token with a secret");
    if (v.token_hosts.empty()) return Unsafe(v.kind, "no host to use the token with");
    g.token = std::string(kMarker) + Draw("token", v.token, kAlnum, v.token.size() - kMarker.size());
  }
  entry->real = std::move(v);

  std::lock_guard<std::mutex> lock(mu_);
  DropExpiredLocked(now);
  // The same minted value again (a retried call): the same placeholders, the later expiry.
  auto& index = key ? by_key_id_ : by_token_;
  const std::string& ph = key ? g.access_key_id : g.token;
  if (auto it = index.find(ph); it != index.end()) {
    Entry* old = it->second;
    bool same = key ? old->real.access_key_id == entry->real.access_key_id &&
                          ConstantTimeEquals(old->real.secret, entry->real.secret)
                    : ConstantTimeEquals(old->real.token, entry->real.token);
    if (!same) {
      return Error(ErrorCode::kInternal, "AWS credential custody: placeholder collision");
    }
    old->real.expires_unix = std::max(old->real.expires_unix, entry->real.expires_unix);
    MintedPlaceholders out = old->guest;
    vault::SecureWipe(entry->real.secret);
    vault::SecureWipe(entry->real.session_token);
    vault::SecureWipe(entry->real.token);
    return out;
  }
  if (entries_.size() >= kMaxMinted) {
    vault::SecureWipe(entry->real.secret);
    vault::SecureWipe(entry->real.session_token);
    vault::SecureWipe(entry->real.token);
    return Error(ErrorCode::kUnavailable,
                 "AWS credential custody: " + std::to_string(kMaxMinted) +
                     " minted credentials are already held for this VM",
                 "restart the workspace (cloister stop, then start) to drop them");
  }
  MintedPlaceholders out = g;
  index[ph] = entry.get();
  entries_.push_back(std::move(entry));
  return out;
}

Result<AwsSecrets> CredentialCustody::SecretsFor(std::string_view placeholder_key_id) {
  const int64_t now = clock_();
  std::lock_guard<std::mutex> lock(mu_);
  auto it = by_key_id_.find(placeholder_key_id);
  if (it == by_key_id_.end()) {
    return Error(ErrorCode::kNotFound, "not a minted credential's placeholder");
  }
  Entry* e = it->second;
  if (e->real.expires_unix != 0 && e->real.expires_unix <= now) {
    std::string msg = "AWS credential custody: the credential minted by " + e->real.kind + " (" +
                      e->guest.access_key_id + ") expired at " +
                      FormatIso8601(e->real.expires_unix);
    DropExpiredLocked(now);
    return Error(ErrorCode::kPermissionDenied, msg,
                 "ask AWS for new credentials (the call that minted these); cloister holds "
                 "minted credentials until their expiry or until the VM stops");
  }
  AwsSecrets s;
  s.access_key_id = e->real.access_key_id;
  s.secret = e->real.secret;
  s.session_token = e->real.session_token;
  s.placeholder_access_key_id = e->guest.access_key_id;
  s.placeholder_secret = e->guest.secret;
  s.placeholder_token = e->guest.session_token;
  return s;
}

bool CredentialCustody::IsPlaceholderKeyId(std::string_view key_id) {
  std::lock_guard<std::mutex> lock(mu_);
  return by_key_id_.count(key_id) != 0;
}

bool CredentialCustody::IsPlaceholderToken(std::string_view token) {
  std::lock_guard<std::mutex> lock(mu_);
  return by_token_.count(token) != 0;
}

Result<std::string> CredentialCustody::RealToken(std::string_view placeholder_token,
                                                 std::string_view host) {
  const int64_t now = clock_();
  std::lock_guard<std::mutex> lock(mu_);
  auto it = by_token_.find(placeholder_token);
  if (it == by_token_.end()) return Error(ErrorCode::kNotFound, "not a minted token's placeholder");
  Entry* e = it->second;
  if (e->real.expires_unix != 0 && e->real.expires_unix <= now) {
    std::string msg = "AWS credential custody: the token minted by " + e->real.kind +
                      " expired at " + FormatIso8601(e->real.expires_unix);
    DropExpiredLocked(now);
    return Error(ErrorCode::kPermissionDenied, msg,
                 "ask AWS for a new token (the call that minted it)");
  }
  if (!vault::HostInAnyScope(host, e->real.token_hosts)) {
    return Error(ErrorCode::kPermissionDenied,
                 "AWS credential custody: the token minted by " + e->real.kind +
                     " is only put back for " + Join(e->real.token_hosts, ", ") + ", not " +
                     std::string(host));
  }
  return e->real.token;
}

void CredentialCustody::Trace(const proxy::TraceRecord& rec) {
  if (trace_) trace_(rec);
}

size_t CredentialCustody::size() {
  std::lock_guard<std::mutex> lock(mu_);
  DropExpiredLocked(clock_());
  return entries_.size();
}

Result<int64_t> ParseIso8601(std::string_view s) {
  auto bad = [&] {
    return Error(ErrorCode::kCorrupt, "not an ISO 8601 UTC time: '" + std::string(s.substr(0, 40)) + "'");
  };
  if (s.size() < 20 || s.size() > 40) return bad();
  auto num = [&](size_t pos, size_t n, int& out) {
    out = 0;
    for (size_t i = pos; i < pos + n; ++i) {
      if (s[i] < '0' || s[i] > '9') return false;
      out = out * 10 + (s[i] - '0');
    }
    return true;
  };
  int y, mo, d, h, mi, se;
  if (!num(0, 4, y) || s[4] != '-' || !num(5, 2, mo) || s[7] != '-' || !num(8, 2, d) ||
      (s[10] != 'T' && s[10] != 't') || !num(11, 2, h) || s[13] != ':' || !num(14, 2, mi) ||
      s[16] != ':' || !num(17, 2, se)) {
    return bad();
  }
  if (mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || se > 60 || y < 1970) return bad();
  size_t i = 19;
  if (i < s.size() && s[i] == '.') {
    ++i;
    size_t start = i;
    while (i < s.size() && s[i] >= '0' && s[i] <= '9') ++i;
    if (i == start || i - start > 9) return bad();
  }
  int offset = 0;
  std::string_view zone = s.substr(i);
  if (zone == "Z" || zone == "z") {
    offset = 0;
  } else if (zone.size() == 6 && (zone[0] == '+' || zone[0] == '-') && zone[3] == ':') {
    int oh, om;
    if (!num(i + 1, 2, oh) || !num(i + 4, 2, om) || oh > 23 || om > 59) return bad();
    offset = (oh * 3600 + om * 60) * (zone[0] == '+' ? 1 : -1);
  } else {
    return bad();
  }
  std::tm tm{};
  tm.tm_year = y - 1900;
  tm.tm_mon = mo - 1;
  tm.tm_mday = d;
  tm.tm_hour = h;
  tm.tm_min = mi;
  tm.tm_sec = se;
  return static_cast<int64_t>(timegm(&tm)) - offset;
}

std::string FormatIso8601(int64_t unix_seconds) {
  std::time_t t = static_cast<std::time_t>(unix_seconds);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

}  // namespace cloister::aws
