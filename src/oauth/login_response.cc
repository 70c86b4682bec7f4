#include "oauth/login_response.h"

#include <nlohmann/json.hpp>

#include "base/json_util.h"
#include "base/strings.h"
#include "oauth/api_paths.h"
#include "oauth/host_login.h"
#include "oauth/token_body.h"
#include "vault/crypto.h"

namespace cloister::oauth {
namespace {


Error Refused(const std::string& what) {
  return Error(ErrorCode::kInvalidArgument, "the provider's login answer " + what,
               "log in again; or log in on the host and `cloister cred import WORKSPACE "
               "claude|codex`");
}

}  // namespace

Result<vault::Credential> LoginFromTokenResponse(vault::CredentialKind kind,
                                                 std::string_view provider_body, int64_t now_ms) {
  if (!vault::IsSubscriptionKind(kind)) {
    return Error(ErrorCode::kInvalidArgument, "not a subscription kind");
  }
  // SECURITY: `t` holds the real tokens; wiped on every path out.
  auto parsed = ParseTokenResponse(provider_body);
  if (!parsed.ok()) return Refused("is malformed: " + parsed.error().message());
  TokenResponse& t = *parsed;
  struct WipeT {
    TokenResponse& t;
    ~WipeT() {
      vault::SecureWipe(t.access_token);
      vault::SecureWipe(t.refresh_token);
      vault::SecureWipe(t.id_token);
    }
  } wipe{t};
  if (t.refresh_token.empty()) return Refused("has no refresh_token");
  vault::OauthLogin login;
  login.refresh_token = t.refresh_token;
  login.last_refresh = now_ms / 1000;
  login.source = "capture";
  if (t.expires_in > 0) login.expires_at_ms = now_ms + t.expires_in * 1000;
  for (const std::string& s : Split(t.scope, ' ')) {
    if (!s.empty() && login.scopes.size() < 64) login.scopes.push_back(s);
  }
  // SECURITY: a minting scope (org:create_api_key) is not kept (api_paths.h): the next refresh
  // asks for the stored scopes only, and the minting paths are refused meanwhile.
  login.scopes = WithoutMintingScopes(login.scopes);
  if (kind == vault::CredentialKind::kClaudeSubscription) {
    bool inference = false;
    for (const std::string& s : login.scopes) inference |= s == "user:inference";
    if (!inference) return Refused("lacks the user:inference scope (not a subscription login)");
    nlohmann::json j = nlohmann::json::parse(provider_body, nullptr, false);
    if (j.is_object() && j.contains("account")) {
      login.account = JsonString(j["account"], "email_address");
      if (login.account.empty()) login.account = JsonString(j["account"], "uuid");
    }
    j.clear();
  } else {
    if (t.id_token.empty()) return Refused("has no id_token");
    login.id_token = t.id_token;
    auto access_claims = JwtPayload(t.access_token);
    if (!access_claims.ok()) return Refused("has an access token that is not a JWT");
    nlohmann::json a = nlohmann::json::parse(*access_claims, nullptr, false);
    vault::SecureWipe(access_claims.value());
    if (a.is_object() && a.contains("exp") && a["exp"].is_number_integer()) {
      login.expires_at_ms = a["exp"].get<int64_t>() * 1000;
    }
    a.clear();
    auto id_claims = JwtPayload(t.id_token);
    if (!id_claims.ok()) return Refused("has an id token that is not a JWT");
    nlohmann::json c = nlohmann::json::parse(*id_claims, nullptr, false);
    vault::SecureWipe(id_claims.value());
    if (!c.is_object()) return Refused("has an id token whose claims are not JSON");
    login.account = JsonString(c, "email");
    const char* kAuth = "https://api.openai.com/auth";
    if (c.contains(kAuth) && c[kAuth].is_object()) {
      login.plan = JsonString(c[kAuth], "chatgpt_plan_type");
      login.account_id = JsonString(c[kAuth], "chatgpt_account_id");
    }
    c.clear();
    if (login.account.empty()) login.account = login.account_id;
  }
  // Metadata from the provider that does not fit `cred ls` is dropped, never a reason to refuse.
  auto plain = [](std::string& v) {
    bool ok = v.size() <= 256;
    for (char ch : v) ok &= ch >= 0x20 && ch < 0x7f;
    if (!ok) v.clear();
  };
  plain(login.account);
  plain(login.plan);
  plain(login.account_id);
  std::vector<std::string> scopes;
  for (std::string& s : login.scopes) {
    plain(s);
    if (!s.empty()) scopes.push_back(std::move(s));
  }
  login.scopes = std::move(scopes);
  auto cred = vault::MakeOauthCredential(kind, t.access_token, std::move(login), {});
  if (!cred.ok()) return Refused("was refused: " + cred.error().message());
  return cred;
}

}  // namespace cloister::oauth
