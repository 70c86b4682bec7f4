// Credentials of a workspace: what they are, which hosts they belong to, where they go in a request.
//
// SECURITY: Credential::value is a real secret. It lives in the supervisor's memory (decrypted from
// the workspace's secrets file by vault.h) and in the encrypted file; it is never written to any
// other file, environment variable, log, trace, or anything that reaches the guest.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"

namespace cloister::vault {

enum class CredentialKind {
  kAnthropic, kOpenai, kGithub, kGitlab, kHeader, kAws,
  // Subscription (OAuth) logins, taken into custody by `cred import` (oauth/): the access token is
  // `value`, the rest is in Credential::oauth. No header substitution of their own: the proxy's
  // oauth filter swaps the current access token (it rotates) and answers refreshes.
  kClaudeSubscription, kChatgptSubscription,
};

// Static facts about a kind.
struct KindInfo {
  CredentialKind kind;
  const char* name;                        // "anthropic", ... as typed on the command line
  std::vector<std::string> default_hosts;  // scope when --host is not given
  std::vector<std::string> headers;        // lower-case header names substituted for this kind
  std::vector<std::string> env_vars;       // guest environment variables holding the placeholder
  bool llm_provider;                       // its hosts receive LLM conversations (see proxy docs)
};

const KindInfo& InfoFor(CredentialKind kind);
// Every kind, in declaration order (tests that must cover each one iterate over this).
std::vector<CredentialKind> AllCredentialKinds();
Result<CredentialKind> ParseKind(std::string_view name);
const char* KindName(CredentialKind kind);

// A subscription login (kClaudeSubscription, kChatgptSubscription). Only the fields marked
// SECURITY are secret; the rest is shown by `cred ls` and written into the guest's credentials file.
struct OauthLogin {
  std::string refresh_token;  // SECURITY: real, single use (the provider rotates it)
  std::string id_token;       // SECURITY: real (ChatGPT only: an OpenID JWT)
  int64_t expires_at_ms = 0;  // the access token's expiry (unix ms); 0 unknown
  std::vector<std::string> scopes;  // as granted (Claude checks user:inference)
  std::string plan;           // subscriptionType (Claude) / chatgpt_plan_type (ChatGPT)
  std::string rate_limit_tier;  // Claude's rateLimitTier, "" if none
  std::string account;        // email or account id, for `cred ls` (not secret)
  std::string account_id;     // ChatGPT account id (tokens.account_id; sent as a header)
  int64_t last_refresh = 0;   // unix seconds of the last refresh (or import, or capture)
  // The refresh record (oauth/custody.h), shown by `cred ls`; not secret:
  // refresh_started_at: unix seconds a refresh was sent with the stored refresh token and its
  //   answer not yet saved; still set after a crash, it says the stored refresh token may have
  //   been retired by the provider (the login may be lost). 0: none pending.
  // refresh_error / refresh_error_at: the last failed refresh (message, unix seconds); cleared by
  //   the next successful one.
  int64_t refresh_started_at = 0;
  std::string refresh_error;
  int64_t refresh_error_at = 0;
  std::string source;         // "import" (cred import) or "capture" (a login typed in the guest)
  // Hosts (exact or subdomain) of the token endpoint: the refresh token's scope.
  std::vector<std::string> token_hosts;
};
// Ask-before-use consent (`cloister cred policy NAME CRED --ask ...`, proxy/consent_filter.h):
// off (default: the proxy swaps whenever the scope holds), once (the first use waits for a
// person's decision; the grant's length decides after that), always (every use asks).
enum class ConsentAsk { kOff, kOnce, kAlways };
const char* ConsentAskName(ConsentAsk a);  // "off", "once", "always"
Result<ConsentAsk> ParseConsentAsk(std::string_view name);

struct Credential {
  CredentialKind kind = CredentialKind::kHeader;
  // Unique within a workspace: the kind's name, or "header:<lower-case header name>".
  std::string id;
  std::string value;               // SECURITY: the real secret
  std::vector<std::string> hosts;  // scope: exact-or-subdomain, lower-case, no port
  std::string header;              // kHeader only: lower-case header name
  bool body_substitution = false;  // opt-in: also swap the placeholder inside request bodies
  // The credential's policy (`cloister cred policy`): set there only, kept by every other writer
  // (Vault::Put keeps the stored one when a new value replaces the credential: `cred add`,
  // `cred import`, a login captured in the guest, a refresh).
  ConsentAsk ask = ConsentAsk::kOff;  // ask before use (vault.h "ask")
  // Subscription kinds: paths of the API hosts the access token is swapped on besides the pinned
  // clients' own (oauth/api_paths.h), "/exact" or "/prefix/*" (vault.h "allow_paths").
  std::vector<std::string> allow_paths;
  // kAws only (`value` is the secret access key; nothing is substituted in headers: the proxy's
  // AWS filter re-signs, see aws/proxy_filter.h).
  std::string aws_access_key_id;  // not secret: the guest gets the real one
  std::string aws_session_token;  // SECURITY: secret; empty for long-term keys
  std::string aws_region;         // optional, e.g. "eu-west-1"
  OauthLogin oauth;               // subscription kinds only
};

// True for kClaudeSubscription and kChatgptSubscription.
bool IsSubscriptionKind(CredentialKind kind);
// The token endpoint hosts of a subscription kind (the refresh token's default scope).
std::vector<std::string> DefaultTokenHosts(CredentialKind kind);

// The id a credential of this kind (and header) gets.
std::string CredentialId(CredentialKind kind, std::string_view header);

// Lower-cases, strips one trailing dot, and checks a host name for the scope list: letters, digits,
// '-', '.', no empty labels, no port, no wildcard, at most 253 bytes.
Result<std::string> NormalizeScopeHost(std::string_view host);

// True iff `host` equals `scope` or is a subdomain of it (ends with "." + scope), compared
// case-insensitively after dropping one trailing dot from `host`. Never a substring match and
// never a suffix without a dot boundary: "evilanthropic.com" is not in "anthropic.com", and
// "api.anthropic.com.evil.test" is not in "api.anthropic.com".
bool HostInScope(std::string_view host, std::string_view scope);
bool HostInAnyScope(std::string_view host, const std::vector<std::string>& scopes);

// Builds and validates a credential from the `cred add` inputs. `hosts` replaces the kind's default
// scope when non-empty; kHeader requires a header name and at least one host. The value must be
// printable ASCII without spaces (what fits in an HTTP header), 8..4096 bytes.
Result<Credential> MakeCredential(CredentialKind kind, std::string value,
                                  const std::vector<std::string>& hosts, std::string_view header,
                                  bool body_substitution);

// Builds and validates an AWS credential (kind kAws, id "aws"): access key id 16..128 letters and
// digits; secret 16..128 printable characters without spaces; session token (optional) at most
// 8192 characters of [A-Za-z0-9+/=_-]; region (optional) lower-case letters, digits and '-'.
// `hosts` replaces the default scope ("amazonaws.com") when non-empty.
// SECURITY: no error message contains the secret or the token.
Result<Credential> MakeAwsCredential(std::string access_key_id, std::string secret,
                                     std::string session_token, std::string region,
                                     const std::vector<std::string>& hosts);

// Builds and validates a subscription login (kind kClaudeSubscription or kChatgptSubscription,
// id = the kind's name): access and refresh tokens (and the ChatGPT id token) printable ASCII
// without spaces, 8..16384 bytes; `login.token_hosts` empty: the kind's default. `hosts`
// replaces the API scope when non-empty.
// SECURITY: no error message contains a token.
Result<Credential> MakeOauthCredential(CredentialKind kind, std::string access_token,
                                       OauthLogin login, const std::vector<std::string>& hosts);

}  // namespace cloister::vault
