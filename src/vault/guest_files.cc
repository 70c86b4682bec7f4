#include "vault/guest_files.h"

#include <time.h>

#include <nlohmann/json.hpp>

namespace cloister::vault {
namespace {

std::string IsoUtc(int64_t unix_seconds) {
  time_t t = static_cast<time_t>(unix_seconds);
  struct tm tm {};
  gmtime_r(&t, &tm);
  char buf[32];
  strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// Claude Code 2.1.332 reads ~/.claude/.credentials.json (mode 0600 or it refuses):
// {"claudeAiOauth":{accessToken, refreshToken, expiresAt (ms), scopes, subscriptionType,
// rateLimitTier}}. The expiry is the real one (tracked): Claude refreshes before it, through the
// proxy, which answers with the same placeholders.
std::string ClaudeCredentialsFile(const BoundCredential& b) {
  const OauthLogin& o = b.credential.oauth;
  nlohmann::json login = {{"accessToken", b.placeholder},
                          {"refreshToken", b.refresh_placeholder},
                          {"expiresAt", o.expires_at_ms},
                          {"scopes", o.scopes}};
  login["subscriptionType"] = o.plan.empty() ? nlohmann::json(nullptr) : nlohmann::json(o.plan);
  login["rateLimitTier"] =
      o.rate_limit_tier.empty() ? nlohmann::json(nullptr) : nlohmann::json(o.rate_limit_tier);
  return nlohmann::json({{"claudeAiOauth", login}}).dump(2) + "\n";
}

// Codex 0.171.0 reads $CODEX_HOME/auth.json (default ~/.codex):
// {"OPENAI_API_KEY":null,"tokens":{id_token, access_token, refresh_token, account_id},
//  "last_refresh":"<RFC 3339>"}.
std::string CodexAuthFile(const BoundCredential& b) {
  const OauthLogin& o = b.credential.oauth;
  nlohmann::json tokens = {{"id_token", b.id_token_placeholder},
                           {"access_token", b.placeholder},
                           {"refresh_token", b.refresh_placeholder}};
  tokens["account_id"] = o.account_id.empty() ? nlohmann::json(nullptr)
                                              : nlohmann::json(o.account_id);
  nlohmann::json doc = {{"OPENAI_API_KEY", nullptr}, {"tokens", tokens}};
  doc["last_refresh"] = IsoUtc(o.last_refresh);
  return doc.dump(2) + "\n";
}

}  // namespace

GuestCredentials BuildGuestCredentials(const std::vector<BoundCredential>& creds) {
  GuestCredentials out;
  std::string git_credentials;
  std::string gh_hosts;
  for (const BoundCredential& b : creds) {
    const Credential& c = b.credential;
    for (const std::string& var : InfoFor(c.kind).env_vars) out.env[var] = b.placeholder;
    if (c.kind == CredentialKind::kGithub) {
      for (const std::string& host : c.hosts) {
        if (host == "githubusercontent.com") continue;
        // git sends Basic x-access-token:<token>; the proxy swaps the password part.
        git_credentials += "https://x-access-token:" + b.placeholder + "@" + host + "\n";
        gh_hosts += host + ":\n    oauth_token: " + b.placeholder +
                    "\n    user: x-access-token\n    git_protocol: https\n";
      }
    } else if (c.kind == CredentialKind::kAws && c.id != "aws:session-token") {
      // The real key id (not secret; it must match what the proxy re-signs for) with the
      // placeholder secret and token: every AWS SDK and the CLI read these.
      out.env["AWS_ACCESS_KEY_ID"] = c.aws_access_key_id;
      out.env["AWS_SECRET_ACCESS_KEY"] = b.placeholder;
      if (!b.aws_token_placeholder.empty()) out.env["AWS_SESSION_TOKEN"] = b.aws_token_placeholder;
      if (!c.aws_region.empty()) {
        out.env["AWS_REGION"] = c.aws_region;
        out.env["AWS_DEFAULT_REGION"] = c.aws_region;
      }
    } else if (c.kind == CredentialKind::kClaudeSubscription) {
      out.files.push_back({".claude/.credentials.json", ClaudeCredentialsFile(b), 0600});
    } else if (c.kind == CredentialKind::kChatgptSubscription) {
      out.files.push_back({".codex/auth.json", CodexAuthFile(b), 0600});
    } else if (c.kind == CredentialKind::kGitlab) {
      for (const std::string& host : c.hosts) {
        git_credentials += "https://oauth2:" + b.placeholder + "@" + host + "\n";
      }
    }
  }
  if (!git_credentials.empty()) {
    out.files.push_back({".git-credentials", git_credentials, 0600});
    // git reads ~/.git-credentials only through the "store" helper: enable it for every git in
    // the guest without writing a config file the user owns (git >= 2.31 reads these).
    out.env["GIT_CONFIG_COUNT"] = "1";
    out.env["GIT_CONFIG_KEY_0"] = "credential.helper";
    out.env["GIT_CONFIG_VALUE_0"] = "store";
  }
  if (!gh_hosts.empty()) out.files.push_back({".config/gh/hosts.yml", gh_hosts, 0600});
  return out;
}

}  // namespace cloister::vault
