#include "oauth/host_login.h"

#include <cstdlib>
#include <nlohmann/json.hpp>

#include "base/json_util.h"
#include "oauth/api_paths.h"
#include "vault/crypto.h"

namespace cloister::oauth {
namespace {

constexpr size_t kMaxLoginFile = 1 << 20;


Error Malformed(const std::string& what, const std::string& hint) {
  return Error(ErrorCode::kInvalidArgument, what, hint);
}

}  // namespace

Result<Provider> ParseProvider(std::string_view name) {
  if (name == "claude") return Provider::kClaude;
  if (name == "codex") return Provider::kCodex;
  return Error(ErrorCode::kInvalidArgument, "unknown login provider: " + std::string(name),
               "use `claude` (Claude Code's subscription login) or `codex` (ChatGPT's)");
}

vault::CredentialKind KindOf(Provider p) {
  return p == Provider::kClaude ? vault::CredentialKind::kClaudeSubscription
                                : vault::CredentialKind::kChatgptSubscription;
}

Result<std::string> HostLoginPath(Provider p) {
  auto env = [](const char* n) -> std::string {
    const char* v = std::getenv(n);
    return v && *v ? v : "";
  };
  std::string home = env("HOME");
  if (p == Provider::kClaude) {
    if (std::string dir = env("CLAUDE_CONFIG_DIR"); !dir.empty()) return dir + "/.credentials.json";
    if (home.empty()) return Error(ErrorCode::kFailedPrecondition, "HOME is not set");
    return home + "/.claude/.credentials.json";
  }
  if (std::string dir = env("CODEX_HOME"); !dir.empty()) return dir + "/auth.json";
  if (home.empty()) return Error(ErrorCode::kFailedPrecondition, "HOME is not set");
  return home + "/.codex/auth.json";
}

Result<std::string> JwtPayload(std::string_view jwt) {
  size_t a = jwt.find('.');
  size_t b = a == std::string_view::npos ? a : jwt.find('.', a + 1);
  if (b == std::string_view::npos || jwt.size() > 16384) {
    return Error(ErrorCode::kInvalidArgument, "not a JWT");
  }
  auto payload = vault::Base64Decode(jwt.substr(a + 1, b - a - 1));
  if (!payload.ok()) return Error(ErrorCode::kInvalidArgument, "not a JWT (payload)");
  return payload;
}

Result<vault::Credential> LoginFromClaudeFile(std::string_view credentials_json,
                                              std::string_view claude_json, int64_t now_unix) {
  const std::string hint = "log in on the host first (`claude`, then /login), then import again";
  if (credentials_json.size() > kMaxLoginFile) return Malformed("credentials file too large", hint);
  nlohmann::json doc = nlohmann::json::parse(credentials_json, nullptr, false);
  if (doc.is_discarded() || !doc.is_object() || !doc.contains("claudeAiOauth") ||
      !doc["claudeAiOauth"].is_object()) {
    return Malformed("no claudeAiOauth login in Claude Code's credentials file", hint);
  }
  const nlohmann::json& o = doc["claudeAiOauth"];
  vault::OauthLogin login;
  login.refresh_token = JsonString(o, "refreshToken");
  std::string access = JsonString(o, "accessToken");
  if (access.empty() || login.refresh_token.empty()) {
    return Malformed("the Claude login has no access or refresh token (a setup-token login?)",
                     "a long-lived `claude setup-token` token is an API credential: "
                     "`cloister cred add NAME anthropic` takes it; else " + hint);
  }
  if (o.contains("expiresAt") && o["expiresAt"].is_number_integer()) {
    login.expires_at_ms = o["expiresAt"].get<int64_t>();
  }
  if (o.contains("scopes") && o["scopes"].is_array()) {
    for (const auto& s : o["scopes"]) {
      if (s.is_string()) login.scopes.push_back(s.get<std::string>());
    }
  }
  // SECURITY: a minting scope (org:create_api_key) is not kept (api_paths.h): the workspace's
  // first refresh asks for the stored scopes only, and the minting paths are refused meanwhile.
  login.scopes = WithoutMintingScopes(login.scopes);
  bool inference = false;
  for (const auto& s : login.scopes) inference |= s == "user:inference";
  if (!inference) {
    // Claude Code 2.1.332 treats a login without user:inference as not a subscription login.
    return Malformed("the Claude login lacks the user:inference scope", hint);
  }
  login.plan = JsonString(o, "subscriptionType");
  login.rate_limit_tier = JsonString(o, "rateLimitTier");
  login.last_refresh = now_unix;
  if (!claude_json.empty() && claude_json.size() <= kMaxLoginFile) {
    nlohmann::json cj = nlohmann::json::parse(claude_json, nullptr, false);
    if (cj.is_object() && cj.contains("oauthAccount")) {
      login.account = JsonString(cj["oauthAccount"], "emailAddress");
      if (login.account.empty()) login.account = JsonString(cj["oauthAccount"], "accountUuid");
    }
  }
  doc.clear();
  auto cred = vault::MakeOauthCredential(vault::CredentialKind::kClaudeSubscription,
                                         std::move(access), std::move(login), {});
  return cred;
}

Result<vault::Credential> LoginFromCodexFile(std::string_view auth_json, int64_t now_unix) {
  const std::string hint = "log in on the host first (`codex login`), then import again";
  if (auth_json.size() > kMaxLoginFile) return Malformed("auth.json too large", hint);
  nlohmann::json doc = nlohmann::json::parse(auth_json, nullptr, false);
  if (doc.is_discarded() || !doc.is_object()) return Malformed("Codex's auth.json is not JSON", hint);
  if (!doc.contains("tokens") || !doc["tokens"].is_object()) {
    if (!JsonString(doc, "OPENAI_API_KEY").empty()) {
      return Malformed("Codex is logged in with an API key, not ChatGPT",
                       "take the key with `cloister cred add NAME openai`");
    }
    return Malformed("no ChatGPT login in Codex's auth.json", hint);
  }
  const nlohmann::json& t = doc["tokens"];
  vault::OauthLogin login;
  std::string access = JsonString(t, "access_token");
  login.refresh_token = JsonString(t, "refresh_token");
  login.id_token = JsonString(t, "id_token");
  login.account_id = JsonString(t, "account_id");
  if (access.empty() || login.refresh_token.empty() || login.id_token.empty()) {
    return Malformed("the ChatGPT login lacks a token (id, access or refresh)", hint);
  }
  login.last_refresh = now_unix;
  if (auto p = JwtPayload(access); p.ok()) {
    nlohmann::json c = nlohmann::json::parse(*p, nullptr, false);
    vault::SecureWipe(p.value());
    if (c.is_object() && c.contains("exp") && c["exp"].is_number_integer()) {
      login.expires_at_ms = c["exp"].get<int64_t>() * 1000;
    }
  } else {
    return Malformed("the ChatGPT access token is not a JWT", hint);
  }
  if (auto p = JwtPayload(login.id_token); p.ok()) {
    nlohmann::json c = nlohmann::json::parse(*p, nullptr, false);
    vault::SecureWipe(p.value());
    if (c.is_object()) {
      login.account = JsonString(c, "email");
      const char* kAuth = "https://api.openai.com/auth";
      if (c.contains(kAuth) && c[kAuth].is_object()) {
        login.plan = JsonString(c[kAuth], "chatgpt_plan_type");
        if (login.account_id.empty()) login.account_id = JsonString(c[kAuth], "chatgpt_account_id");
      }
      if (login.account.empty() && c.contains("https://api.openai.com/profile")) {
        login.account = JsonString(c["https://api.openai.com/profile"], "email");
      }
    }
  } else {
    return Malformed("the ChatGPT id token is not a JWT", hint);
  }
  if (login.account.empty()) login.account = login.account_id;
  doc.clear();
  return vault::MakeOauthCredential(vault::CredentialKind::kChatgptSubscription, std::move(access),
                                    std::move(login), {});
}

}  // namespace cloister::oauth
