// Subscription logins through the real proxy (TLS interception, the filter chain, the detector)
// with real curl as the guest's client and a fake provider on 127.0.0.1 reached through the
// resolve override: nothing leaves loopback.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "oauth/proxy_rig.h"

namespace cloister::oauth {
namespace {


using Case = testing::ProviderCase;

class OauthProxyTest : public ::testing::TestWithParam<Case>, public testing::OauthProxyRig {
 protected:
  void SetUp() override {
    const Case& k = GetParam();
    ASSERT_NO_FATAL_FAILURE(StartProvider(k.jwt));
    login = tv.Import(*provider, k.jwt);
    ASSERT_NO_FATAL_FAILURE(
        StartProxy({k.api_host, k.token_host, "elsewhere.example"}, {login}));
  }

  proxy::testing::CurlOut Api(const std::string& bearer, const std::string& host = "") {
    const Case& k = GetParam();
    return Curl(host.empty() ? k.api_host : host, k.api_path,
                {"-H", "Authorization: Bearer " + bearer});
  }
  proxy::testing::CurlOut Token(const std::string& body) {
    const Case& k = GetParam();
    return Curl(k.token_host, k.token_path,
                {"-X", "POST", "-H", "Content-Type: application/json", "--data-binary", body});
  }
  std::string RefreshBody() {
    return nlohmann::json({{"grant_type", "refresh_token"},
                           {"refresh_token", login.refresh_placeholder},
                           {"client_id", "9d1c250a-e61b-44d9-88ed-5944d1962f5e"}})
        .dump();
  }

  vault::BoundCredential login;
};

TEST_P(OauthProxyTest, ApiCallRefreshRotationAndTheGuestOnlySeesPlaceholders) {
  // 1. The API accepts the call: the proxy put the real access token in.
  auto a = Api(login.placeholder);
  ASSERT_EQ(a.code, 200) << a.body << a.err;
  ASSERT_TRUE(upstream->WaitForRequests(1, std::chrono::seconds(10)));
  EXPECT_EQ(upstream->requests().back().Header("authorization"), "Bearer " + provider->access());

  // 2. The guest's refresh, with its placeholder: the provider saw the real refresh token and
  //    rotated; the guest got placeholders; the vault holds the new login.
  std::string first_refresh = provider->refresh();
  auto r = Token(RefreshBody());
  ASSERT_EQ(r.code, 200) << r.body << r.err;
  EXPECT_EQ(provider->refreshes(), 1);
  EXPECT_NE(provider->refresh(), first_refresh);
  ExpectNoRealToken(r.body);
  auto doc = nlohmann::json::parse(r.body);
  EXPECT_EQ(doc["refresh_token"], login.refresh_placeholder);
  EXPECT_EQ(vault::JwtSignature(doc["access_token"].get<std::string>()),
            vault::JwtSignature(login.placeholder));
  EXPECT_EQ(tv.Stored(login.credential.id).oauth.refresh_token, provider->refresh());
  EXPECT_EQ(tv.Stored(login.credential.id).value, provider->access());

  // 3. The same access placeholder now stands for the new token (the fake takes only that one).
  auto b = Api(doc["access_token"].get<std::string>());
  EXPECT_EQ(b.code, 200) << b.body;
  auto old = Api(login.placeholder);  // the placeholder the guest had before: same signature
  EXPECT_EQ(old.code, 200) << old.body;

  // 4. A second refresh uses the rotated token, not the retired one (reuse would revoke).
  auto r2 = Token(RefreshBody());
  ASSERT_EQ(r2.code, 200) << r2.body;
  EXPECT_EQ(provider->refreshes(), 2);
  EXPECT_FALSE(provider->revoked());
  ExpectNoRealToken(r2.body);

  // 5. The trace records the refreshes (ids only, no token).
  auto recs = env.TraceAtLeast(6);
  int refreshes = 0;
  for (const auto& rec : recs) {
    for (const auto& s : rec.swaps) refreshes += s == "oauth-refresh:" + login.credential.id;
    ExpectNoRealToken(rec.ToJson().dump());
  }
  EXPECT_EQ(refreshes, 2);
  EXPECT_TRUE(env.Events().empty());
}

// A login inside the guest (authorization code or device code exchange) would hand the guest real
// tokens: the answer is refused, nothing of it reaches the guest.
TEST_P(OauthProxyTest, TokenEndpointAnswerWithRealTokensIsRefused) {
  auto r = Token(R"({"grant_type":"authorization_code","code":"abc","code_verifier":"v"})");
  EXPECT_EQ(r.code, 502) << r.body;
  EXPECT_NE(r.body.find("cred import"), std::string::npos) << r.body;
  ExpectNoRealToken(r.body + r.err);
  // A refresh with a token that is not our placeholder (e.g. typed in by hand) is refused too.
  auto other = Token(R"({"grant_type":"refresh_token","refresh_token":")" + provider->refresh() +
                     R"("})");
  EXPECT_EQ(other.code, 502) << other.body;
  ExpectNoRealToken(other.body);
}

// The access placeholder to a host outside the login's API scope, and the refresh placeholder to
// the API host (outside the token endpoint's scope), trip the detector: 451, compromise. (In a
// header: a placeholder in the BODY of a request to an LLM host is only flagged by default, the
// LLM body policy of docs/threat-model.md.)
TEST_P(OauthProxyTest, PlaceholderToAnotherHostTripsTheDetector) {
  auto a = Api(login.placeholder, "elsewhere.example");
  EXPECT_EQ(a.code, 451) << a.body;
  auto events = env.Events();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].credential, login.credential.id);
  EXPECT_EQ(events[0].host, "elsewhere.example");
  for (const auto& req : upstream->requests()) {
    EXPECT_NE(req.sni, "elsewhere.example") << "the leaking request went upstream";
  }
}

// ChatGPT: the JWT placeholder's payload follows the real token (it changes at every refresh), so
// the detector knows it by its signature: a placeholder JWT with any payload trips it.
TEST_P(OauthProxyTest, JwtPlaceholderWithAnotherPayloadStillTripsTheDetector) {
  if (!GetParam().jwt) GTEST_SKIP() << "Claude's placeholders are not JWTs";
  std::string ph = login.placeholder;
  size_t a = ph.find('.'), b = ph.rfind('.');
  std::string other = ph.substr(0, a) + ".eyJleHAiOjF9" + ph.substr(b);  // {"exp":1}
  auto r = Api(other, "elsewhere.example");
  EXPECT_EQ(r.code, 451) << r.body;
  ASSERT_EQ(env.Events().size(), 1u);
  EXPECT_EQ(env.Events()[0].credential, login.credential.id);
}

TEST_P(OauthProxyTest, RefreshPlaceholderToTheApiHostTripsTheDetector) {
  const Case& k = GetParam();
  auto a = Curl(k.api_host, k.api_path, {"-H", "X-Session: " + login.refresh_placeholder});
  EXPECT_EQ(a.code, 451) << a.body;
  auto events = env.Events();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].credential, login.credential.id + ":refresh");
  EXPECT_EQ(provider->refreshes(), 0);
}

INSTANTIATE_TEST_SUITE_P(
    Providers, OauthProxyTest,
    ::testing::Values(Case{false, "api.anthropic.com", "/v1/messages", "platform.claude.com",
                           "/v1/oauth/token"},
                      Case{true, "chatgpt.com", "/backend-api/codex/responses", "auth.openai.com",
                           "/oauth/token"}),
    [](const auto& info) { return info.param.jwt ? "chatgpt" : "claude"; });

}  // namespace
}  // namespace cloister::oauth
