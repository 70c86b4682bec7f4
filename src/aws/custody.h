// AWS credential custody: credentials that AWS mints for the guest (STS session tokens and role
// credentials, SSO role credentials, Cognito identity credentials, IAM access keys, ECR and
// CodeArtifact authorization tokens) are kept here, on the host, and the guest gets placeholders.
//
// One CredentialCustody per proxy instance (the proxy of one workspace's VM): it lives in the
// CustodyFilter that AddAwsFilters puts in the proxy's configuration, so every minted value dies
// with the proxy (VM stop, reboot) or at its expiry, whichever is first. Nothing is written to
// disk.
//
// Placeholders keep the structure tools check (AKIA/ASIA prefix and length of the key id, a
// 40-character secret, the session token's length over the base64 alphabet, the token's length)
// and are drawn from HMAC-SHA256 under a random per-instance key over the minted value, so they
// are deterministic per minted value within one proxy and carry no bit of it. Secrets and tokens
// start with the marker "CLOISTER" so a human in the guest can tell.
//
// Thread safe (one mutex); shared by every proxy thread.
// SECURITY: holds real minted secrets in memory only; they leave this object only as AwsSecrets
// for the re-signer or as the real token put back into a request header, never in an error
// message or a trace record (those carry placeholders and kinds only). Wiped on destruction.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "aws/resigner.h"
#include "base/result.h"
#include "proxy/trace.h"

namespace cloister::aws {

inline constexpr size_t kMaxMinted = 1024;        // live minted credentials per proxy
inline constexpr size_t kMaxMintedTokenLen = 8192;  // longer tokens are refused, not held

// What AWS minted, as the response carried it. Key credentials have access_key_id + secret
// (+ session_token); token credentials (ECR, CodeArtifact) have token only.
struct MintedValues {
  std::string kind;  // "sts:AssumeRole", "ecr:GetAuthorizationToken", ... (for errors and traces)
  std::string access_key_id, secret, session_token;  // real
  std::string token;                                 // real bearer token or registry password
  int64_t expires_unix = 0;  // 0: no expiry from AWS (IAM access keys): dies with the proxy
  // Token credentials: the hosts (exact or subdomain) the token may be put back for.
  std::vector<std::string> token_hosts;
};

// The guest's copies.
struct MintedPlaceholders {
  std::string access_key_id, secret, session_token, token;
};

class CredentialCustody {
 public:
  using Clock = std::function<int64_t()>;  // unix seconds
  using TraceFn = std::function<void(const proxy::TraceRecord&)>;
  // `trace`: receives one record per minted credential (may be null; AddAwsFilters passes the
  // proxy's TraceSink). `clock`: for tests (default: the system clock).
  static Result<std::shared_ptr<CredentialCustody>> Create(TraceFn trace, Clock clock = nullptr);
  ~CredentialCustody();
  CredentialCustody(const CredentialCustody&) = delete;
  CredentialCustody& operator=(const CredentialCustody&) = delete;

  // Takes `v` into custody and returns the guest's placeholders. Refuses (kInvalidArgument) a value
  // whose shape cannot be replaced, an already expired one, and (kUnavailable) more than
  // kMaxMinted live credentials. The same minted value twice gets the same placeholders.
  Result<MintedPlaceholders> Add(MintedValues v);

  // The re-signer's secrets for a request the guest signed with a minted placeholder key id.
  // kNotFound: not a minted placeholder; kPermissionDenied: expired (the entry is dropped).
  Result<AwsSecrets> SecretsFor(std::string_view placeholder_key_id);
  bool IsPlaceholderKeyId(std::string_view key_id);
  bool IsPlaceholderToken(std::string_view token);
  // The real token for a placeholder token sent to `host`. kNotFound: not a placeholder;
  // kPermissionDenied: expired, or `host` is not one the token was minted for.
  Result<std::string> RealToken(std::string_view placeholder_token, std::string_view host);

  // Writes one trace record for a minted credential (placeholder id and kind only).
  void Trace(const proxy::TraceRecord& rec);
  size_t size();
  int64_t Now() const { return clock_(); }

 private:
  CredentialCustody() = default;
  struct Entry {
    MintedValues real;
    MintedPlaceholders guest;
  };
  std::string Draw(std::string_view label, std::string_view value, std::string_view alphabet,
                   size_t n) const;
  void DropExpiredLocked(int64_t now);

  std::string key_;  // SECURITY: HMAC key of the placeholders, random per instance
  Clock clock_;
  TraceFn trace_;
  std::mutex mu_;
  std::vector<std::unique_ptr<Entry>> entries_;               // guarded by mu_
  std::map<std::string, Entry*, std::less<>> by_key_id_;      // placeholder key id -> entry
  std::map<std::string, Entry*, std::less<>> by_token_;       // placeholder token -> entry
};

// "2026-12-01T12:00:00Z" (also with fractional seconds or "+00:00") -> unix seconds.
Result<int64_t> ParseIso8601(std::string_view s);
std::string FormatIso8601(int64_t unix_seconds);

}  // namespace cloister::aws
