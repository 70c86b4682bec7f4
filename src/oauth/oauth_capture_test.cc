// Login capture through the real proxy: a workspace without a login, real curl as the guest's
// client running the pinned clients' login flows step by step (Claude Code: authorization code +
// PKCE with the code pasted from the host's browser; Codex: device code), a fake provider on
// 127.0.0.1 reached through the resolve override (nothing leaves loopback). The proxy forwards the
// exchange, keeps the real tokens (saved to the vault before the guest's answer) and answers with
// placeholders the detector already knew.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "oauth/proxy_rig.h"

namespace cloister::oauth {
namespace {

using testing::FakeProvider;

using Case = testing::ProviderCase;

constexpr char kClaudeClientId[] = "9d1c250a-e61b-44d9-88ed-5944d1962f5e";
constexpr char kCodexClientId[] = "app_EMoamEEZ73f0CkXaXp7hrann";
constexpr char kClaudeManualRedirect[] = "https://platform.claude.com/oauth/code/callback";
constexpr char kCodexDeviceRedirect[] = "https://auth.openai.com/deviceauth/callback";

class OauthCaptureTest : public ::testing::TestWithParam<Case>, public testing::OauthProxyRig {
 protected:
  // `create`: the capture persister (default: the vault's, with create).
  void Start(LoginCustody::PersistFn create = nullptr,
             proxy::testing::Handler handler = nullptr) {
    const Case& k = GetParam();
    ASSERT_NO_FATAL_FAILURE(StartProvider(k.jwt, handler));
    provider->set_strict_pkce(true);
    auto v = vault::Vault::Open(tv.loc, vault::KeyBackend::kFile);
    ASSERT_TRUE(v.ok());
    auto slots = v->BindCaptureSlots();
    ASSERT_TRUE(slots.ok());
    ASSERT_EQ(slots->size(), 2u);  // no login yet: a slot per kind
    for (const auto& s : *slots) {
      if (s.credential.kind == (k.jwt ? vault::CredentialKind::kChatgptSubscription
                                      : vault::CredentialKind::kClaudeSubscription)) {
        slot = s;
      }
    }
    if (!create) create = VaultPersister(tv.loc, vault::KeyBackend::kFile, "", true);
    ASSERT_NO_FATAL_FAILURE(StartProxy({k.api_host, k.token_host, "elsewhere.example"}, {},
                                       std::move(slots).value(), create));
  }
  proxy::testing::CurlOut PostJson(const std::string& path, const nlohmann::json& body) {
    return Curl(GetParam().token_host, path,
                {"-X", "POST", "-H", "Content-Type: application/json", "--data-binary",
                 body.dump()});
  }

  // The guest's login, as the pinned client does it; returns the token endpoint's answer.
  proxy::testing::CurlOut GuestLogin(const std::string& verifier_override = "") {
    const Case& k = GetParam();
    std::string verifier = "guest-pkce-verifier-" + std::string(40, 'x');
    if (!k.jwt) {
      // Claude Code: the user opens the authorize URL in the host's browser (code_challenge =
      // S256(verifier), redirect = the manual callback page) and pastes the code it shows.
      std::string code = provider->Authorize(FakeProvider::S256(verifier), kClaudeManualRedirect);
      return PostJson(k.token_path,
                      {{"grant_type", "authorization_code"}, {"code", code},
                       {"redirect_uri", kClaudeManualRedirect}, {"client_id", kClaudeClientId},
                       {"code_verifier", verifier_override.empty() ? verifier : verifier_override},
                       {"state", "guest-state"}});
    }
    // Codex --device-auth: a user code, the user approves it in any browser, the client polls,
    // then exchanges the code (form-encoded) at the token endpoint.
    auto uc = PostJson("/api/accounts/deviceauth/usercode", {{"client_id", kCodexClientId}});
    EXPECT_EQ(uc.code, 200) << uc.body;
    auto ucj = nlohmann::json::parse(uc.body, nullptr, false);
    std::string device = ucj.value("device_auth_id", ""), user = ucj.value("user_code", "");
    auto pending = PostJson("/api/accounts/deviceauth/token",
                            {{"device_auth_id", device}, {"user_code", user}});
    EXPECT_EQ(pending.code, 403) << pending.body;
    EXPECT_TRUE(provider->ApproveDevice(user));
    auto tok = PostJson("/api/accounts/deviceauth/token",
                        {{"device_auth_id", device}, {"user_code", user}});
    EXPECT_EQ(tok.code, 200) << tok.body;
    auto tj = nlohmann::json::parse(tok.body, nullptr, false);
    std::string code = tj.value("authorization_code", "");
    std::string v = verifier_override.empty() ? tj.value("code_verifier", "") : verifier_override;
    std::string form = "grant_type=authorization_code&code=" + code +
                       "&redirect_uri=https%3A%2F%2Fauth.openai.com%2Fdeviceauth%2Fcallback"
                       "&client_id=" + std::string(kCodexClientId) + "&code_verifier=" + v;
    return Curl(k.token_host, k.token_path,
                {"-X", "POST", "-H", "Content-Type: application/x-www-form-urlencoded",
                 "--data-binary", form});
  }

  const vault::Credential* Stored(vault::Vault& v) {
    return v.Find(slot.credential.id);
  }

  vault::BoundCredential slot;
};

TEST_P(OauthCaptureTest, LoginInTheGuestIsCapturedSavedAndAnsweredWithPlaceholders) {
  Start();
  const Case& k = GetParam();
  auto r = GuestLogin();
  ASSERT_EQ(r.code, 200) << r.body << r.err;
  EXPECT_EQ(provider->logins(), 1);
  ExpectNoRealToken(r.body + r.err);
  auto doc = nlohmann::json::parse(r.body);
  // The guest's answer: the slot's placeholders (the detector knew them before the login).
  EXPECT_EQ(doc["refresh_token"], slot.refresh_placeholder);
  if (k.jwt) {
    EXPECT_EQ(vault::JwtSignature(doc["access_token"].get<std::string>()),
              vault::JwtSignature(slot.placeholder));
    EXPECT_EQ(vault::JwtSignature(doc["id_token"].get<std::string>()),
              vault::JwtSignature(slot.id_token_placeholder));
    // The id token placeholder keeps the public claims Codex reads (email, plan, account).
    auto claims = JwtPayload(doc["id_token"].get<std::string>());
    ASSERT_TRUE(claims.ok());
    auto c = nlohmann::json::parse(*claims);
    EXPECT_EQ(c["email"], "dev@example.test");
    EXPECT_EQ(c["https://api.openai.com/auth"]["chatgpt_account_id"], "acct-fake-1");
  } else {
    EXPECT_EQ(doc["access_token"], slot.placeholder);
    EXPECT_EQ(doc["account"]["email_address"], "dev@example.test");  // other fields kept
  }
  EXPECT_EQ(doc["expires_in"], 3600);

  // Saved to the vault (the answer came after the save): the real tokens, bound to this workspace.
  {
    auto v = vault::Vault::Open(tv.loc, vault::KeyBackend::kFile);
    ASSERT_TRUE(v.ok());
    const vault::Credential* c = Stored(*v);
    ASSERT_NE(c, nullptr);
    EXPECT_EQ(c->value, provider->access());
    EXPECT_EQ(c->oauth.refresh_token, provider->refresh());
    if (k.jwt) EXPECT_EQ(c->oauth.id_token, provider->id_token());
    EXPECT_EQ(c->oauth.source, "capture");
    EXPECT_EQ(c->oauth.account, "dev@example.test");
    // The next boot binds the same placeholders when the tokens have the usual shape (Claude's
    // fake tokens do; the fake's JWT signatures are 342 characters like RS256's).
    auto bound = v->Bind();
    ASSERT_TRUE(bound.ok());
    for (const auto& b : *bound) {
      if (b.credential.id != slot.credential.id) continue;
      if (!k.jwt) {
        EXPECT_EQ(b.placeholder, slot.placeholder);
        EXPECT_EQ(b.refresh_placeholder, slot.refresh_placeholder);
      } else {
        EXPECT_EQ(vault::JwtSignature(b.placeholder), vault::JwtSignature(slot.placeholder));
      }
    }
  }

  // The captured login works like an imported one: the API call (the proxy swaps the
  // placeholder for the real access token) and a refresh with the refresh placeholder.
  auto api = Curl(k.api_host, k.api_path,
                  {"-H", "Authorization: Bearer " + doc["access_token"].get<std::string>()});
  EXPECT_EQ(api.code, 200) << api.body;
  std::string before = provider->refresh();
  auto rr = PostJson(k.token_path, {{"grant_type", "refresh_token"},
                                    {"refresh_token", slot.refresh_placeholder},
                                    {"client_id", k.jwt ? kCodexClientId : kClaudeClientId}});
  ASSERT_EQ(rr.code, 200) << rr.body;
  EXPECT_EQ(provider->refreshes(), 1);
  EXPECT_NE(provider->refresh(), before);
  ExpectNoRealToken(rr.body);
  EXPECT_EQ(tv.Stored(slot.credential.id).oauth.refresh_token, provider->refresh());

  // The trace records the capture (id only, no token).
  auto recs = env.TraceAtLeast(1);
  int captures = 0;
  for (const auto& rec : recs) {
    for (const auto& s : rec.swaps) captures += s == "oauth-capture:" + slot.credential.id;
    ExpectNoRealToken(rec.ToJson().dump());
  }
  EXPECT_EQ(captures, 1);
  EXPECT_TRUE(env.Events().empty());
}

// The capture slot's placeholders trip the detector toward any other host, before any login.
TEST_P(OauthCaptureTest, SlotPlaceholdersAreKnownToTheDetectorBeforeTheLogin) {
  Start();
  auto a = Curl("elsewhere.example", "/x", {"-H", "Authorization: Bearer " + slot.placeholder});
  EXPECT_EQ(a.code, 451) << a.body;
  ASSERT_EQ(env.Events().size(), 1u);
  EXPECT_EQ(env.Events()[0].credential, slot.credential.id);
}

TEST_P(OauthCaptureTest, RefreshPlaceholderOfTheSlotTripsTheDetectorOutsideTheTokenHosts) {
  Start();
  auto a = Curl(GetParam().api_host, "/x", {"-H", "X-Leak: " + slot.refresh_placeholder});
  EXPECT_EQ(a.code, 451) << a.body;
  ASSERT_EQ(env.Events().size(), 1u);
  EXPECT_EQ(env.Events()[0].credential, slot.credential.id + ":refresh");
}

// Fail closed: the captured login cannot be saved -> the guest gets an error and no token; the
// vault holds no login.
TEST_P(OauthCaptureTest, SaveFailureAnswersAnErrorAndNothingReal) {
  int tries = 0;
  Start([&](const vault::Credential&) -> Status {
    ++tries;
    return Error(ErrorCode::kIo, "injected: no space left on device");
  });
  auto r = GuestLogin();
  EXPECT_EQ(r.code, 502) << r.body;
  EXPECT_EQ(tries, 1);
  EXPECT_EQ(provider->logins(), 1);  // the provider did answer with tokens
  ExpectNoRealToken(r.body + r.err);
  EXPECT_NE(r.body.find("could not save"), std::string::npos) << r.body;
  auto v = vault::Vault::Open(tv.loc, vault::KeyBackend::kFile);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(Stored(*v), nullptr);
  EXPECT_FALSE(filter->logins()[0]->has_login() && filter->logins()[1]->has_login());
}

// Fail closed: a 200 the proxy cannot take into custody (here: tokens without a refresh token,
// or an unparsable body around a real token) -> 502, nothing of it forwarded.
TEST_P(OauthCaptureTest, UnusableProviderAnswerAnswersAnErrorAndNothingReal) {
  bool jwt = GetParam().jwt;
  auto inner = std::make_shared<FakeProvider>(jwt);
  std::string real = inner->access();
  int n = 0;
  Start(nullptr, [real, &n](const proxy::testing::SeenRequest& req,
                            proxy::testing::ResponseWriter& w) {
    std::map<std::string, std::string> json = {{"Content-Type", "application/json"}};
    if (n++ == 0) {
      w.Send(200, json, nlohmann::json({{"access_token", real}, {"expires_in", 3600},
                                        {"scope", "user:inference"}}).dump());
    } else {
      w.Send(200, json, "{\"access_token\":\"" + real + "\",");  // truncated JSON
    }
    (void)req;
  });
  for (int i = 0; i < 2; ++i) {
    auto r = PostJson(GetParam().token_path, {{"grant_type", "authorization_code"},
                                              {"code", "c"}, {"code_verifier", "v"}});
    EXPECT_EQ(r.code, 502) << r.body;
    EXPECT_EQ(r.body.find(real), std::string::npos) << "a real token reached the guest";
    std::string sig(vault::JwtSignature(real));
    if (!sig.empty()) EXPECT_EQ(r.body.find(sig), std::string::npos);
  }
  auto v = vault::Vault::Open(tv.loc, vault::KeyBackend::kFile);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(Stored(*v), nullptr);
}

// The fake checks PKCE like the provider: a wrong verifier is refused (400, no token, nothing
// captured); the guest gets the provider's error.
TEST_P(OauthCaptureTest, WrongPkceVerifierIsRefusedByTheProvider) {
  Start();
  auto r = GuestLogin("not-the-verifier-" + std::string(40, 'z'));
  EXPECT_EQ(r.code, 400) << r.body;
  EXPECT_EQ(provider->logins(), 0);
  auto v = vault::Vault::Open(tv.loc, vault::KeyBackend::kFile);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(Stored(*v), nullptr);
}

INSTANTIATE_TEST_SUITE_P(
    Providers, OauthCaptureTest,
    ::testing::Values(Case{false, "api.anthropic.com", "/v1/messages", "platform.claude.com",
                           "/v1/oauth/token"},
                      Case{true, "chatgpt.com", "/backend-api/codex/responses", "auth.openai.com",
                           "/oauth/token"}),
    [](const auto& info) { return info.param.jwt ? "chatgpt" : "claude"; });

}  // namespace
}  // namespace cloister::oauth
