#include "oauth/token_body.h"
#include "oauth/login_response.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace cloister::oauth {
namespace {

TEST(TokenBodyTest, ParsesJsonRefresh) {
  auto r = ParseTokenRequest(
      R"({"grant_type":"refresh_token","refresh_token":"sk-ant-ort01-PH","client_id":"x","scope":"a b"})");
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->json);
  EXPECT_EQ(r->grant_type, "refresh_token");
  EXPECT_EQ(r->refresh_token, "sk-ant-ort01-PH");
}

TEST(TokenBodyTest, ParsesFormRefresh) {
  auto r = ParseTokenRequest("grant_type=refresh_token&refresh_token=rt%2BPH%3D&client_id=x");
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->json);
  EXPECT_EQ(r->refresh_token, "rt+PH=");
}

TEST(TokenBodyTest, RefusesMalformedAndHuge) {
  EXPECT_FALSE(ParseTokenRequest("{\"grant_type\":").ok());
  EXPECT_FALSE(ParseTokenRequest("[1,2]").ok());
  EXPECT_FALSE(ParseTokenRequest("a=%zz").ok());
  EXPECT_FALSE(ParseTokenRequest("a=%4").ok());
  EXPECT_FALSE(ParseTokenRequest(std::string(kMaxTokenBody + 1, 'a')).ok());
}

// SECURITY (issue 37 item 8): a field given twice is read differently by different servers
// (first or last wins): refused, in a form and in JSON at any depth.
TEST(TokenBodyTest, RefusesAFieldGivenTwice) {
  EXPECT_FALSE(ParseTokenRequest("grant_type=refresh_token&refresh_token=a&refresh_token=b").ok());
  EXPECT_FALSE(ParseTokenRequest("grant_type=refresh_token&grant_type=authorization_code").ok());
  EXPECT_FALSE(ParseTokenRequest("client_id=a&client_id=b").ok());
  EXPECT_FALSE(ParseTokenRequest(R"({"refresh_token":"a","refresh_token":"b"})").ok());
  EXPECT_FALSE(ParseTokenRequest(R"({"grant_type":"x","a":{"b":1,"b":2}})").ok());
  EXPECT_FALSE(ParseTokenRequest(R"({"grant_type":["refresh_token"]})").ok());
  auto ok = ParseTokenRequest(R"({"grant_type":"refresh_token","a":{"b":1},"c":{"b":2},"scope":"x y"})");
  ASSERT_TRUE(ok.ok()) << ok.error().ToString();
  EXPECT_EQ(ok->scope, "x y");
  auto exchange = ParseTokenRequest("grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Atoken-exchange"
                                    "&requested_token=openai-api-key");
  ASSERT_TRUE(exchange.ok());
  EXPECT_EQ(exchange->requested_token, "openai-api-key");
}

TEST(TokenBodyTest, SwapsOnlyTheRefreshToken) {
  auto j = SwapRefreshToken(R"({"grant_type":"refresh_token","refresh_token":"PH","client_id":"c"})",
                            "REAL");
  ASSERT_TRUE(j.ok());
  auto doc = nlohmann::json::parse(*j);
  EXPECT_EQ(doc["refresh_token"], "REAL");
  EXPECT_EQ(doc["client_id"], "c");
  EXPECT_EQ(doc["grant_type"], "refresh_token");
  auto f = SwapRefreshToken("grant_type=refresh_token&refresh_token=PH&client_id=c", "RE AL/");
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(*f, "grant_type=refresh_token&refresh_token=RE%20AL%2F&client_id=c");
}

TEST(TokenBodyTest, ParsesResponseAndRefusesOneWithoutAccessToken) {
  auto r = ParseTokenResponse(
      R"({"access_token":"A","refresh_token":"R","expires_in":3600,"scope":"s1 s2","token_type":"Bearer"})");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->access_token, "A");
  EXPECT_EQ(r->refresh_token, "R");
  EXPECT_EQ(r->expires_in, 3600);
  EXPECT_EQ(r->scope, "s1 s2");
  EXPECT_FALSE(ParseTokenResponse(R"({"refresh_token":"R"})").ok());
  EXPECT_FALSE(ParseTokenResponse(R"({"access_token":"A","expires_in":-1})").ok());
  EXPECT_FALSE(ParseTokenResponse("not json").ok());
}

TEST(TokenBodyTest, RewriteReplacesEveryTokenAndKeepsTheRest) {
  auto out = RewriteTokenResponse(
      R"({"access_token":"REALA","refresh_token":"REALR","id_token":"REALI","expires_in":5,"account":{"email_address":"e"}})",
      "PHA", "PHR", "");
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(out->find("REAL"), std::string::npos) << *out;
  auto doc = nlohmann::json::parse(*out);
  EXPECT_EQ(doc["access_token"], "PHA");
  EXPECT_EQ(doc["refresh_token"], "PHR");
  EXPECT_FALSE(doc.contains("id_token"));  // no placeholder for it: removed
  EXPECT_EQ(doc["expires_in"], 5);
  EXPECT_EQ(doc["account"]["email_address"], "e");
}

// The provider's answer to a login typed in the guest, as capture reads it.
TEST(LoginFromTokenResponseTest, ClaudeNeedsInferenceScopeAndARefreshToken) {
  std::string access = "sk-ant-oat01-" + std::string(93, 'q') + "AA";
  std::string refresh = "sk-ant-ort01-" + std::string(93, 'r') + "AA";
  auto answer = [&](const std::string& scope, const std::string& rt) {
    return R"({"access_token":")" + access + R"(","refresh_token":")" + rt +
           R"(","expires_in":28800,"scope":")" + scope +
           R"(","account":{"uuid":"u-1","email_address":"dev@example.test"}})";
  };
  auto ok = LoginFromTokenResponse(vault::CredentialKind::kClaudeSubscription,
                                   answer("user:inference user:profile", refresh), 1'800'000'000'000);
  ASSERT_TRUE(ok.ok()) << ok.error().ToString();
  EXPECT_EQ(ok->value, access);
  EXPECT_EQ(ok->oauth.refresh_token, refresh);
  EXPECT_EQ(ok->oauth.expires_at_ms, 1'800'000'000'000 + 28800 * 1000);
  EXPECT_EQ(ok->oauth.account, "dev@example.test");
  EXPECT_EQ(ok->oauth.source, "capture");
  EXPECT_EQ(ok->oauth.token_hosts,
            vault::DefaultTokenHosts(vault::CredentialKind::kClaudeSubscription));
  auto console = LoginFromTokenResponse(vault::CredentialKind::kClaudeSubscription,
                                        answer("org:create_api_key user:profile", refresh), 0);
  ASSERT_FALSE(console.ok());
  EXPECT_NE(console.error().message().find("user:inference"), std::string::npos);
  EXPECT_EQ(console.error().ToString().find(access), std::string::npos);  // no token in errors
  EXPECT_FALSE(LoginFromTokenResponse(vault::CredentialKind::kClaudeSubscription,
                                      answer("user:inference", ""), 0).ok());
  // ChatGPT wants JWTs.
  EXPECT_FALSE(LoginFromTokenResponse(vault::CredentialKind::kChatgptSubscription,
                                      answer("openid", refresh), 0).ok());
}

}  // namespace
}  // namespace cloister::oauth
