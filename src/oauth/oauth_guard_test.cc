// What a subscription login may reach and what a token host may hand back, through the real proxy
// with real curl as the guest's client and a fake provider on 127.0.0.1 (issue 37):
//   - the access token is swapped only on the paths its pinned client needs (api_paths.h); any
//     other path of the API host is a traced 403 naming `cred policy ... --allow-path`; a path
//     that mints a credential (create_api_key) is refused even when allowed, and the fake that
//     would answer it with a key never sees the request;
//   - an upstream that reflects the swapped token (header, base64, JSON) hands the guest the
//     placeholder only, and the trace names the swap;
//   - every answer of a token host is scanned deeply: a real token in a nested field, or at an
//     endpoint that is not the token endpoint, is refused (502);
//   - a token request with a field twice, a token exchange (minting an API key) and a refresh that
//     asks for a minting scope are refused (403).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "oauth/proxy_rig.h"
#include "vault/crypto.h"

namespace cloister::oauth {
namespace {

using Case = testing::ProviderCase;

const std::string kMintedKey =
    "sk-ant-api03-MINTEDxFROMxTHExLOGINx0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRST-AA";

class OauthGuardTest : public ::testing::TestWithParam<Case>, public testing::OauthProxyRig {
 protected:
  void SetUp() override {
    const Case& k = GetParam();
    ASSERT_NO_FATAL_FAILURE(StartProvider(k.jwt, [this](const proxy::testing::SeenRequest& r,
                                                         proxy::testing::ResponseWriter& w) {
      Answer(r, w);
    }));
    login = tv.Import(*provider, k.jwt);
  }
  void Start(std::vector<std::string> allow_paths = {}) {
    const Case& k = GetParam();
    login.credential.allow_paths = std::move(allow_paths);
    ASSERT_NO_FATAL_FAILURE(StartProxy({k.api_host, k.token_host}, {login}));
  }
  // The fake upstream: the provider, plus what an attacker's favourite endpoints would answer to
  // the real token, and a token host that puts a real token where the login flows do not.
  void Answer(const proxy::testing::SeenRequest& r, proxy::testing::ResponseWriter& w) {
    std::string path = r.target.substr(0, r.target.find('?'));
    bool real = r.Header("authorization") == "Bearer " + provider->access();
    if (path == "/api/oauth/claude_cli/create_api_key" || path == "/v1/mcp_servers") {
      minting_seen = true;
      if (real) {
        w.Send(200, {{"content-type", "application/json"}},
               nlohmann::json{{"raw_key", kMintedKey}}.dump());
      } else {
        w.Send(401, {}, "no");
      }
      return;
    }
    if (path == GetParam().api_path && r.Header("x-reflect") == "1") {
      // An in-scope upstream that echoes the credential back, in three forms.
      std::string authz = r.Header("authorization");
      w.Send(200, {{"content-type", "application/json"}, {"x-echo", authz}},
             nlohmann::json{{"echo", authz}, {"b64", vault::Base64Encode(authz)}}.dump());
      return;
    }
    if (path == "/nested-token") {
      w.Send(200, {{"content-type", "application/json"}},
             nlohmann::json{{"data", {{"items", {{{"x", {{"y", provider->access()}}}}}}}}}.dump());
      return;
    }
    if (path == "/page") {
      w.Send(200, {{"content-type", "text/html"}},
             "<html><script>var s='" + provider->refresh() + "';</script></html>");
      return;
    }
    provider->handler()(r, w);
  }
  proxy::testing::CurlOut Api(const std::string& path, std::vector<std::string> extra = {}) {
    extra.insert(extra.begin(), {"-H", "Authorization: Bearer " + login.placeholder});
    return Curl(GetParam().api_host, path, extra);
  }
  proxy::testing::CurlOut Token(const std::string& path, const std::string& body,
                                const std::string& type = "application/json") {
    return Curl(GetParam().token_host, path,
                {"-X", "POST", "-H", "Content-Type: " + type, "--data-binary", body});
  }

  vault::BoundCredential login;
  std::atomic<bool> minting_seen{false};
};

// SECURITY (item 4): the guest can mint no API key from the login, even when the user allowed
// the path by mistake; a path the client does not need is a 403 that says how to allow it.
TEST_P(OauthGuardTest, TheLoginReachesOnlyItsClientsPathsAndNeverMints) {
  const Case& k = GetParam();
  ASSERT_NO_FATAL_FAILURE(Start({"/api/oauth/claude_cli/create_api_key", "/v1/mcp_servers"}));
  auto mint = Api("/api/oauth/claude_cli/create_api_key", {"-X", "POST"});
  EXPECT_EQ(mint.code, 403) << mint.body;
  EXPECT_EQ(mint.body.find(kMintedKey), std::string::npos);
  EXPECT_NE(mint.body.find("mints a credential"), std::string::npos) << mint.body;
  EXPECT_FALSE(minting_seen.load()) << "the minting request went upstream";
  // Escapes, '..' and case tricks are not a way around it.
  for (const char* p : {"/api/oauth/claude_cli/%63reate_api_key", "/v1/messages/../api/oauth/x",
                        "/api/oauth/claude_cli/CREATE_API_KEY", "//v1/messages"}) {
    auto r = Api(p, {"--path-as-is"});
    EXPECT_EQ(r.code, 403) << p << ": " << r.body;
  }
  // The inference path works; an allowed extra path too (the user's --allow-path).
  auto ok = Api(k.api_path);
  EXPECT_EQ(ok.code, 200) << ok.body;
  auto allowed = Api("/v1/mcp_servers");
  EXPECT_EQ(allowed.code, 200) << allowed.body;
  // Traced: the refusal with its reason, the swap by name.
  bool refused = false, swapped = false;
  for (const auto& rec : env.TraceAtLeast(3)) {
    refused |= rec.status == 403 && rec.path.find("create_api_key") != std::string::npos &&
               rec.error.find("mints a credential") != std::string::npos;
    for (const auto& s : rec.swaps) swapped |= s == login.credential.id;
  }
  EXPECT_TRUE(refused);
  EXPECT_TRUE(swapped);
}

TEST_P(OauthGuardTest, APathTheClientDoesNotNeedIsRefusedWithTheFix) {
  ASSERT_NO_FATAL_FAILURE(Start());
  auto r = Api("/v1/mcp_servers");
  EXPECT_EQ(r.code, 403) << r.body;
  EXPECT_NE(r.body.find("`cloister cred policy WORKSPACE " + login.credential.id +
                        " --allow-path /v1/mcp_servers`"),
            std::string::npos)
      << r.body;
  EXPECT_FALSE(minting_seen.load());
  auto recs = env.TraceAtLeast(1);
  EXPECT_EQ(recs.back().status, 403);
  EXPECT_NE(recs.back().error.find("--allow-path"), std::string::npos) << recs.back().error;
}

// SECURITY (item 3): a reflecting upstream gets the real token, the guest gets the placeholder.
TEST_P(OauthGuardTest, AReflectedAccessTokenReachesTheGuestAsItsPlaceholder) {
  ASSERT_NO_FATAL_FAILURE(Start());
  auto r = Api(GetParam().api_path, {"-H", "X-Reflect: 1", "-i"});
  ASSERT_EQ(r.code, 200) << r.body;
  ExpectNoRealToken(r.body);
  EXPECT_EQ(r.body.find(vault::Base64Encode("Bearer " + provider->access())), std::string::npos);
}

// SECURITY (item 8): no answer of a token host hands the guest a real token, wherever it is.
TEST_P(OauthGuardTest, EveryAnswerOfATokenHostIsScannedDeeply) {
  ASSERT_NO_FATAL_FAILURE(Start());
  auto nested = Curl(GetParam().token_host, "/nested-token", {});
  EXPECT_EQ(nested.code, 502) << nested.body;
  ExpectNoRealToken(nested.body);
  auto page = Curl(GetParam().token_host, "/page", {});
  EXPECT_EQ(page.code, 502) << page.body;
  ExpectNoRealToken(page.body);
}

// SECURITY (items 8 and 4): token requests the proxy could read otherwise than the provider, a
// token exchange for an API key, and a refresh asking for a minting scope are refused.
TEST_P(OauthGuardTest, AmbiguousAndMintingTokenRequestsAreRefused) {
  ASSERT_NO_FATAL_FAILURE(Start());
  const std::string path = GetParam().token_path;
  const std::string ph = login.refresh_placeholder;
  auto form = Token(path, "grant_type=refresh_token&refresh_token=" + ph + "&refresh_token=x",
                    "application/x-www-form-urlencoded");
  EXPECT_EQ(form.code, 403) << form.body;
  auto json = Token(path, R"({"grant_type":"refresh_token","refresh_token":")" + ph +
                              R"(","refresh_token":"x"})");
  EXPECT_EQ(json.code, 403) << json.body;
  auto nested = Token(path, R"({"grant_type":"refresh_token","refresh_token":")" + ph +
                                R"(","x":{"a":1,"a":2}})");
  EXPECT_EQ(nested.code, 403) << nested.body;
  auto exchange = Token(path, R"({"grant_type":"urn:ietf:params:oauth:grant-type:token-exchange",)"
                              R"("requested_token":"openai-api-key","subject_token":"x"})");
  EXPECT_EQ(exchange.code, 403) << exchange.body;
  auto scope = Token(path, nlohmann::json{{"grant_type", "refresh_token"},
                                          {"refresh_token", ph},
                                          {"scope", "user:inference org:create_api_key"}}
                               .dump());
  EXPECT_EQ(scope.code, 403) << scope.body;
  EXPECT_EQ(provider->refreshes(), 0) << "a refused refresh reached the provider";
  // The plain refresh still works.
  auto ok = Token(path, nlohmann::json{{"grant_type", "refresh_token"}, {"refresh_token", ph}}.dump());
  EXPECT_EQ(ok.code, 200) << ok.body;
  ExpectNoRealToken(ok.body);
}

INSTANTIATE_TEST_SUITE_P(
    Providers, OauthGuardTest,
    ::testing::Values(Case{false, "api.anthropic.com", "/v1/messages", "platform.claude.com",
                           "/v1/oauth/token"},
                      Case{true, "chatgpt.com", "/backend-api/codex/responses", "auth.openai.com",
                           "/oauth/token"}),
    [](const auto& info) { return info.param.jwt ? "chatgpt" : "claude"; });

}  // namespace
}  // namespace cloister::oauth
