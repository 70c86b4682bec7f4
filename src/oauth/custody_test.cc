#include "oauth/custody.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "oauth/test_util.h"
#include "oauth/oauth_filter.h"
#include "oauth/wiring.h"
#include "vault/placeholder.h"

namespace cloister::oauth {
namespace {

using testing::FakeProvider;
using testing::TempVault;

std::string ProviderAnswer(FakeProvider& p, bool jwt) {
  nlohmann::json j = {{"access_token", p.MintAccess()}, {"refresh_token", p.MintRefresh()},
                      {"expires_in", 3600}, {"token_type", "Bearer"}};
  if (jwt) j["id_token"] = p.MintId();
  return j.dump();
}

class CustodyTest : public ::testing::TestWithParam<bool> {};  // param: jwt (ChatGPT)

TEST_P(CustodyTest, RefreshRotatesSavesFirstAndAnswersPlaceholders) {
  bool jwt = GetParam();
  FakeProvider p(jwt);
  TempVault tv;
  vault::BoundCredential b = tv.Import(p, jwt);
  std::string old_refresh = b.credential.oauth.refresh_token;
  std::vector<std::string> saved;  // the refresh token the vault held when each save ran
  auto persister = VaultPersister(tv.loc, vault::KeyBackend::kFile);
  LoginCustody c(b, [&](const vault::Credential& login) {
    Status st = persister(login);
    saved.push_back(tv.Stored(login.id).oauth.refresh_token);
    return st;
  }, nullptr, [] { return int64_t{1800000000000}; });

  ASSERT_EQ(c.state(), RefreshState::kIdle);
  auto real = c.BeginRefresh();
  ASSERT_TRUE(real.ok());
  EXPECT_EQ(*real, old_refresh);
  EXPECT_EQ(c.state(), RefreshState::kInFlight);
  // The refresh record is on disk before the single-use token leaves.
  EXPECT_EQ(tv.Stored(b.credential.id).oauth.refresh_started_at, 1800000000);
  // One refresh in flight per login: a second one would reuse the single-use token.
  auto second = c.BeginRefresh();
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.error().code(), ErrorCode::kUnavailable);

  std::string answer = ProviderAnswer(p, jwt);
  auto parsed = ParseTokenResponse(answer);
  ASSERT_TRUE(parsed.ok());
  auto guest = c.CompleteRefresh(answer);
  ASSERT_TRUE(guest.ok()) << guest.error().ToString();
  EXPECT_EQ(c.state(), RefreshState::kIdle);
  // Saved to the vault before it became current, and the vault now holds the rotated token
  // (the first save is the refresh record, with the old token).
  ASSERT_EQ(saved.size(), 2u);
  EXPECT_EQ(saved[0], old_refresh);
  EXPECT_EQ(saved[1], parsed->refresh_token);
  EXPECT_EQ(tv.Stored(b.credential.id).oauth.refresh_started_at, 0);
  EXPECT_EQ(tv.Stored(b.credential.id).oauth.refresh_token, parsed->refresh_token);
  EXPECT_EQ(tv.Stored(b.credential.id).value, parsed->access_token);
  EXPECT_EQ(c.AccessToken(), parsed->access_token);
  EXPECT_EQ(c.expires_at_ms(), 1800000000000 + 3600 * 1000);
  // The guest's answer: placeholders only, the same ones it already holds.
  for (const std::string& t : p.issued()) {
    EXPECT_EQ(guest->find(t), std::string::npos) << "real token in the guest's answer";
  }
  auto doc = nlohmann::json::parse(*guest);
  EXPECT_TRUE(c.IsRefreshPlaceholder(doc["refresh_token"].get<std::string>()));
  EXPECT_EQ(doc["refresh_token"], b.refresh_placeholder);
  EXPECT_TRUE(c.IsAccessPlaceholder(doc["access_token"].get<std::string>()));
  if (!jwt) EXPECT_EQ(doc["access_token"], b.placeholder);
  if (jwt) {
    // The JWT placeholder follows the new token's public claims (its exp), same signature.
    EXPECT_EQ(vault::JwtSignature(doc["access_token"].get<std::string>()),
              vault::JwtSignature(b.placeholder));
    EXPECT_NE(doc["access_token"], b.placeholder);
    EXPECT_EQ(vault::JwtSignature(doc["id_token"].get<std::string>()),
              vault::JwtSignature(b.id_token_placeholder));
  }
}

TEST_P(CustodyTest, ProviderRefusalKeepsTheOldLogin) {
  bool jwt = GetParam();
  FakeProvider p(jwt);
  TempVault tv;
  vault::BoundCredential b = tv.Import(p, jwt);
  std::vector<vault::Credential> saves;
  LoginCustody c(b, [&](const vault::Credential& l) { saves.push_back(l); return OkStatus(); });
  ASSERT_TRUE(c.BeginRefresh().ok());
  c.AbortRefresh(400);
  EXPECT_EQ(c.state(), RefreshState::kIdle);
  EXPECT_EQ(c.AccessToken(), b.credential.value);
  // Saved: the refresh record, then the failure (same tokens; `cred ls` shows the error).
  ASSERT_EQ(saves.size(), 2u);
  for (const auto& l : saves) EXPECT_EQ(l.oauth.refresh_token, b.credential.oauth.refresh_token);
  EXPECT_NE(saves[1].oauth.refresh_error.find("HTTP 400"), std::string::npos);
  EXPECT_EQ(saves[1].oauth.refresh_started_at, 0);  // refused: the token was not used up
  EXPECT_EQ(c.refresh_error(), saves[1].oauth.refresh_error);
  // No answer at all: the provider may have rotated; the record keeps saying so.
  ASSERT_TRUE(c.BeginRefresh().ok());
  c.AbortRefresh(0);
  EXPECT_NE(saves.back().oauth.refresh_started_at, 0);
  EXPECT_NE(saves.back().oauth.refresh_error.find("may be retired"), std::string::npos);
  // A 200 that carries no tokens changes nothing either.
  ASSERT_TRUE(c.BeginRefresh().ok());
  EXPECT_FALSE(c.CompleteRefresh(R"({"error":"weird"})").ok());
  EXPECT_EQ(c.state(), RefreshState::kIdle);
  EXPECT_EQ(c.AccessToken(), b.credential.value);
  auto again = c.BeginRefresh();
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, b.credential.oauth.refresh_token);
}

// Fault injection: the vault save fails right after the provider rotated the tokens (a full disk,
// an I/O error, a crash of the save). The vault on disk keeps the old login whole (it opens, it
// is not torn), the new login stays current in memory (the provider retired the old refresh
// token: it is the only live one), and it is saved at the next use; no second refresh runs
// until it is.
TEST_P(CustodyTest, SaveFailureAfterRotationKeepsTheNewLoginAndRetries) {
  bool jwt = GetParam();
  FakeProvider p(jwt);
  TempVault tv;
  vault::BoundCredential b = tv.Import(p, jwt);
  auto persister = VaultPersister(tv.loc, vault::KeyBackend::kFile);
  int calls = 0;  // the refresh record's save works; the next two saves fail
  LoginCustody c(b, [&](const vault::Credential& login) -> Status {
    ++calls;
    if (calls == 2 || calls == 3) return Error(ErrorCode::kIo, "injected: no space left on device");
    return persister(login);
  });
  ASSERT_TRUE(c.BeginRefresh().ok());
  std::string answer = ProviderAnswer(p, jwt);
  auto parsed = ParseTokenResponse(answer);
  auto guest = c.CompleteRefresh(answer);
  ASSERT_FALSE(guest.ok());
  EXPECT_EQ(c.state(), RefreshState::kUnsaved);
  EXPECT_NE(guest.error().message().find("could not save"), std::string::npos);
  // The vault still holds the old login, whole, with the record saying a refresh was sent.
  EXPECT_EQ(tv.Stored(b.credential.id).oauth.refresh_token, b.credential.oauth.refresh_token);
  EXPECT_NE(tv.Stored(b.credential.id).oauth.refresh_started_at, 0);
  // A refresh now would have to use the new token; it waits for the save (fails once more).
  auto blocked = c.BeginRefresh();
  ASSERT_FALSE(blocked.ok());
  EXPECT_EQ(blocked.error().code(), ErrorCode::kUnavailable);
  EXPECT_EQ(c.state(), RefreshState::kUnsaved);
  // The API keeps working with the new access token, and this use retries the save: it works.
  EXPECT_EQ(c.AccessToken(), parsed->access_token);
  EXPECT_EQ(c.state(), RefreshState::kIdle);
  EXPECT_EQ(tv.Stored(b.credential.id).oauth.refresh_token, parsed->refresh_token);
  EXPECT_EQ(tv.Stored(b.credential.id).oauth.refresh_started_at, 0);
  auto next = c.BeginRefresh();
  ASSERT_TRUE(next.ok());
  EXPECT_EQ(*next, parsed->refresh_token);
}

// A real failing save (the secrets file's directory is gone): the persister reports it.
TEST(VaultPersisterTest, ReportsARealSaveFailureAndLeavesNoFile) {
  FakeProvider p(false);
  TempVault tv;
  vault::BoundCredential b = tv.Import(p, false);
  vault::VaultLocation gone = tv.loc;
  gone.secrets_file = tv.dir + "/no-such-dir/secrets.enc";
  auto st = VaultPersister(gone, vault::KeyBackend::kFile)(b.credential);
  EXPECT_FALSE(st.ok());
  EXPECT_FALSE(std::filesystem::exists(gone.secrets_file));
  // A login removed by `cred rm` while the workspace ran is not written back.
  {
    auto v = vault::Vault::Open(tv.loc, vault::KeyBackend::kFile);
    ASSERT_TRUE(v->Remove(b.credential.id).ok());
    ASSERT_TRUE(v->Save().ok());
  }
  auto back = VaultPersister(tv.loc, vault::KeyBackend::kFile)(b.credential);
  EXPECT_EQ(back.error().code(), ErrorCode::kNotFound);
  auto v = vault::Vault::Open(tv.loc, vault::KeyBackend::kFile);
  EXPECT_EQ(v->Find(b.credential.id), nullptr);
}

// The filter swaps the access placeholder only toward the login's API scope (the detector trips
// first for any other host; this is the second lock), and only in a Bearer Authorization.
TEST_P(CustodyTest, FilterSwapsOnlyTowardTheApiScope) {
  bool jwt = GetParam();
  FakeProvider p(jwt);
  TempVault tv;
  vault::BoundCredential b = tv.Import(p, jwt);
  auto login = std::make_shared<LoginCustody>(b, [](const vault::Credential&) { return OkStatus(); });
  OauthFilter f({login});
  auto head = [&](const std::string& host, const std::string& auth) {
    proxy::RequestHead h;
    h.method = "GET";
    h.target = jwt ? "/backend-api/codex/responses" : "/v1/messages";  // api_paths.h
    h.host = host;
    h.headers = {{"Authorization", auth}};
    return h;
  };
  std::string api = b.credential.hosts.front();
  auto in = head(api, "Bearer " + b.placeholder);
  auto v = f.OnRequestHead(in);
  ASSERT_TRUE(v.ok());
  EXPECT_TRUE(v->handled);
  EXPECT_EQ(in.headers[0].second, "Bearer " + p.access());
  auto sub = head("eu." + api, "Bearer " + b.placeholder);  // a subdomain is in scope
  ASSERT_TRUE(f.OnRequestHead(sub).ok());
  EXPECT_EQ(sub.headers[0].second, "Bearer " + p.access());
  for (const std::string& host : {std::string("evil") + api, std::string("example.test"),
                                  api + ".example.test"}) {
    auto out = head(host, "Bearer " + b.placeholder);
    auto w = f.OnRequestHead(out);
    ASSERT_TRUE(w.ok());
    EXPECT_FALSE(w->handled) << host;
    EXPECT_EQ(out.headers[0].second, "Bearer " + b.placeholder) << host;
  }
  auto basic = head(api, "Basic " + b.placeholder);
  ASSERT_TRUE(f.OnRequestHead(basic).ok());
  EXPECT_EQ(basic.headers[0].second, "Basic " + b.placeholder);
}

// SECURITY (issue 37 item 1): a login captured in the guest, and a refresh, replace the login
// in the vault and keep its policy (ask, allowed paths); a captured minting scope is not kept.
TEST_P(CustodyTest, ACaptureAndARefreshKeepTheLoginsPolicy) {
  bool jwt = GetParam();
  FakeProvider p(jwt);
  TempVault tv;
  vault::BoundCredential b = tv.Import(p, jwt);
  {
    auto v = vault::Vault::Open(tv.loc, vault::KeyBackend::kFile);
    ASSERT_TRUE(v.ok());
    ASSERT_TRUE(v->SetPolicy(b.credential.id, vault::ConsentAsk::kAlways, {"/v1/files"}).ok());
    ASSERT_TRUE(v->Save().ok());
  }
  LoginCustody c(b, VaultPersister(tv.loc, vault::KeyBackend::kFile), nullptr,
                 [] { return int64_t{1800000000000}; },
                 VaultPersister(tv.loc, vault::KeyBackend::kFile, "", /*create=*/true));
  nlohmann::json answer = nlohmann::json::parse(ProviderAnswer(p, jwt));
  answer["scope"] = "user:inference user:profile org:create_api_key";
  auto captured = c.CaptureLogin(answer.dump());
  ASSERT_TRUE(captured.ok()) << captured.error().ToString();
  vault::Credential stored = tv.Stored(b.credential.id);
  EXPECT_EQ(stored.oauth.source, "capture");
  EXPECT_EQ(stored.ask, vault::ConsentAsk::kAlways) << "a capture reset the ask policy";
  EXPECT_EQ(stored.allow_paths, std::vector<std::string>{"/v1/files"});
  for (const std::string& s : stored.oauth.scopes) EXPECT_NE(s, "org:create_api_key");
  ASSERT_TRUE(c.BeginRefresh().ok());
  ASSERT_TRUE(c.CompleteRefresh(ProviderAnswer(p, jwt)).ok());
  stored = tv.Stored(b.credential.id);
  EXPECT_EQ(stored.ask, vault::ConsentAsk::kAlways) << "a refresh reset the ask policy";
  EXPECT_EQ(stored.allow_paths, std::vector<std::string>{"/v1/files"});
}

INSTANTIATE_TEST_SUITE_P(Providers, CustodyTest, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "chatgpt" : "claude"; });

}  // namespace
}  // namespace cloister::oauth
