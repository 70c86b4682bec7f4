#include "oauth/host_login.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "oauth/test_util.h"
#include "vault/guest_files.h"
#include "vault/placeholder.h"

namespace cloister::oauth {
namespace {

using testing::ClaudeFile;
using testing::CodexFile;
using testing::FakeProvider;
using testing::TempVault;

TEST(HostLoginTest, ReadsClaudeCodesFile) {
  FakeProvider p(false);
  auto c = LoginFromClaudeFile(ClaudeFile(p.access(), p.refresh(), 1800000123456),
                               R"({"oauthAccount":{"emailAddress":"dev@example.test"}})", 1700);
  ASSERT_TRUE(c.ok()) << c.error().ToString();
  EXPECT_EQ(c->kind, vault::CredentialKind::kClaudeSubscription);
  EXPECT_EQ(c->id, "claude-subscription");
  EXPECT_EQ(c->value, p.access());
  EXPECT_EQ(c->oauth.refresh_token, p.refresh());
  EXPECT_EQ(c->oauth.expires_at_ms, 1800000123456);
  EXPECT_EQ(c->oauth.plan, "max");
  EXPECT_EQ(c->oauth.account, "dev@example.test");
  EXPECT_EQ(c->oauth.last_refresh, 1700);
  EXPECT_EQ(c->hosts, std::vector<std::string>{"api.anthropic.com"});
  EXPECT_EQ(c->oauth.token_hosts,
            (std::vector<std::string>{"platform.claude.com", "console.anthropic.com"}));
}

TEST(HostLoginTest, RefusesClaudeFilesItCannotTakeWithTheFix) {
  auto none = LoginFromClaudeFile("{}", "", 0);
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.error().ToString().find("/login"), std::string::npos);
  // No user:inference: Claude Code itself would not use it as a subscription login.
  std::string f = R"({"claudeAiOauth":{"accessToken":"sk-ant-oat01-xxxxxxxxxxxx","refreshToken":"sk-ant-ort01-yyyyyyyyyyyy","expiresAt":1,"scopes":["user:profile"]}})";
  auto noinf = LoginFromClaudeFile(f, "", 0);
  ASSERT_FALSE(noinf.ok());
  EXPECT_NE(noinf.error().message().find("user:inference"), std::string::npos);
  // SECURITY: no token in an error.
  EXPECT_EQ(noinf.error().ToString().find("sk-ant-oat01-xxxx"), std::string::npos);
  std::string bad_token = R"({"claudeAiOauth":{"accessToken":"sk ant oat","refreshToken":"sk-ant-ort01-yyyyyyyyyyyy","scopes":["user:inference"]}})";
  auto r = LoginFromClaudeFile(bad_token, "", 0);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().ToString().find("sk ant oat"), std::string::npos);
}

TEST(HostLoginTest, ReadsCodexAuthJsonWithItsJwtClaims) {
  FakeProvider p(true);
  auto c = LoginFromCodexFile(CodexFile(p.id_token(), p.access(), p.refresh()), 1700);
  ASSERT_TRUE(c.ok()) << c.error().ToString();
  EXPECT_EQ(c->kind, vault::CredentialKind::kChatgptSubscription);
  EXPECT_EQ(c->oauth.account, "dev@example.test");
  EXPECT_EQ(c->oauth.plan, "pro");
  EXPECT_EQ(c->oauth.account_id, "acct-fake-1");
  EXPECT_GT(c->oauth.expires_at_ms, 1900000000LL * 1000);
  EXPECT_EQ(c->hosts, std::vector<std::string>{"chatgpt.com"});
  auto key = LoginFromCodexFile(R"({"OPENAI_API_KEY":"sk-proj-abc"})", 0);
  ASSERT_FALSE(key.ok());
  EXPECT_NE(key.error().ToString().find("cred add"), std::string::npos);
  EXPECT_FALSE(LoginFromCodexFile(CodexFile("notajwt", p.access(), p.refresh()), 0).ok());
}

TEST(HostLoginTest, CredAddRefusesSubscriptionKinds) {
  auto c = vault::MakeCredential(vault::CredentialKind::kClaudeSubscription, "sk-ant-oat01-abcdefgh",
                                 {}, "", false);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error().ToString().find("cred import"), std::string::npos);
}

// The vault keeps a login across Save/Open, and Bind gives every secret its own placeholder of
// the real one's shape.
TEST(HostLoginTest, VaultRoundTripAndPlaceholderShapes) {
  FakeProvider p(false);
  TempVault tv;
  vault::BoundCredential b = tv.Import(p, false);
  vault::Credential back = tv.Stored("claude-subscription");
  EXPECT_EQ(back.value, p.access());
  EXPECT_EQ(back.oauth.refresh_token, p.refresh());
  EXPECT_EQ(back.oauth.scopes.size(), 3u);
  EXPECT_EQ(back.oauth.token_hosts.size(), 2u);
  EXPECT_EQ(b.placeholder.rfind("sk-ant-oat01-CLOISTER", 0), 0u) << b.placeholder;
  EXPECT_EQ(b.refresh_placeholder.rfind("sk-ant-ort01-CLOISTER", 0), 0u) << b.refresh_placeholder;
  EXPECT_EQ(b.placeholder.size(), p.access().size());
  EXPECT_EQ(b.refresh_placeholder.size(), p.refresh().size());
  EXPECT_NE(b.placeholder, b.refresh_placeholder);
  // Deterministic: a second Bind gives the same placeholders.
  auto v = vault::Vault::Open(tv.loc, vault::KeyBackend::kFile);
  auto again = v->Bind();
  EXPECT_EQ(again->front().placeholder, b.placeholder);
  EXPECT_EQ(again->front().refresh_placeholder, b.refresh_placeholder);
}

TEST(HostLoginTest, JwtPlaceholderKeepsOnlyPublicClaimsAndAFakeSignature) {
  FakeProvider p(true);
  TempVault tv;
  vault::BoundCredential b = tv.Import(p, true);
  for (const std::string* ph : {&b.placeholder, &b.id_token_placeholder}) {
    const std::string& real = ph == &b.placeholder ? p.access() : p.id_token();
    // Same header segment, placeholder signature with the marker, of the real one's length.
    EXPECT_EQ(ph->substr(0, ph->find('.')), real.substr(0, real.find('.')));
    std::string_view sig = vault::JwtSignature(*ph);
    EXPECT_EQ(sig.substr(0, 8), "CLOISTER");
    EXPECT_EQ(sig.size(), vault::JwtSignature(real).size());
    EXPECT_EQ(ph->find(vault::JwtSignature(real)), std::string::npos);
    auto payload = JwtPayload(*ph);
    ASSERT_TRUE(payload.ok());
    auto claims = nlohmann::json::parse(*payload);
    EXPECT_EQ(claims["email"], "dev@example.test");
    EXPECT_EQ(claims["https://api.openai.com/auth"]["chatgpt_plan_type"], "pro");
    EXPECT_EQ(claims["https://api.openai.com/auth"]["chatgpt_account_id"], "acct-fake-1");
    EXPECT_TRUE(claims.contains("exp"));
    // What is not on the list stays out (a session secret, the token id).
    EXPECT_EQ(payload->find("SECRET"), std::string::npos) << *payload;
  }
  EXPECT_NE(vault::JwtSignature(b.placeholder), vault::JwtSignature(b.id_token_placeholder));
}

TEST(HostLoginTest, GuestFilesHoldPlaceholdersInTheClientsShapes) {
  FakeProvider cp(false), xp(true);
  TempVault tv;
  vault::BoundCredential claude = tv.Import(cp, false);
  vault::BoundCredential codex = tv.Import(xp, true);
  auto v = vault::Vault::Open(tv.loc, vault::KeyBackend::kFile);
  auto bound = v->Bind();
  ASSERT_TRUE(bound.ok());
  ASSERT_EQ(bound->size(), 2u);
  vault::GuestCredentials g = vault::BuildGuestCredentials(*bound);
  ASSERT_EQ(g.files.size(), 2u);
  std::map<std::string, vault::GuestFile> files;
  for (auto& f : g.files) files[f.path] = f;
  ASSERT_TRUE(files.count(".claude/.credentials.json"));
  ASSERT_TRUE(files.count(".codex/auth.json"));
  EXPECT_EQ(files[".claude/.credentials.json"].mode, 0600);  // Claude refuses group/world bits
  EXPECT_EQ(files[".codex/auth.json"].mode, 0600);
  for (auto& [path, f] : files) {
    for (const std::string& t : cp.issued()) EXPECT_EQ(f.content.find(t), std::string::npos);
    for (const std::string& t : xp.issued()) {
      EXPECT_EQ(f.content.find(vault::JwtSignature(t).empty() ? t : std::string(vault::JwtSignature(t))),
                std::string::npos);
    }
  }
  auto cj = nlohmann::json::parse(files[".claude/.credentials.json"].content);
  const auto& o = cj["claudeAiOauth"];
  EXPECT_EQ(o["accessToken"], (*bound)[0].placeholder);
  EXPECT_EQ(o["refreshToken"], (*bound)[0].refresh_placeholder);
  EXPECT_EQ(o["expiresAt"], 1900000000000);
  EXPECT_EQ(o["subscriptionType"], "max");
  EXPECT_NE(std::find(o["scopes"].begin(), o["scopes"].end(), "user:inference"), o["scopes"].end());
  auto xj = nlohmann::json::parse(files[".codex/auth.json"].content);
  EXPECT_TRUE(xj["OPENAI_API_KEY"].is_null());
  EXPECT_EQ(xj["tokens"]["access_token"], (*bound)[1].placeholder);
  EXPECT_EQ(xj["tokens"]["id_token"], (*bound)[1].id_token_placeholder);
  EXPECT_EQ(xj["tokens"]["refresh_token"], (*bound)[1].refresh_placeholder);
  EXPECT_EQ(xj["tokens"]["account_id"], "acct-fake-1");
  EXPECT_EQ(xj["last_refresh"], "2027-01-15T08:00:00Z");
  EXPECT_TRUE(g.env.empty());
  (void)claude;
  (void)codex;
}

}  // namespace
}  // namespace cloister::oauth
