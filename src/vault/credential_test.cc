#include "vault/credential.h"

#include <gtest/gtest.h>

namespace cloister::vault {
namespace {

TEST(ScopeTest, ExactOrSubdomainOnly) {
  EXPECT_TRUE(HostInScope("api.anthropic.com", "api.anthropic.com"));
  EXPECT_TRUE(HostInScope("API.Anthropic.COM", "api.anthropic.com"));
  EXPECT_TRUE(HostInScope("api.anthropic.com.", "api.anthropic.com"));
  EXPECT_TRUE(HostInScope("api.github.com", "github.com"));
  EXPECT_TRUE(HostInScope("a.b.github.com", "github.com"));
  // Look-alikes.
  EXPECT_FALSE(HostInScope("api.anthropic.com.evil.test", "api.anthropic.com"));
  EXPECT_FALSE(HostInScope("evilanthropic.com", "anthropic.com"));
  EXPECT_FALSE(HostInScope("evilapi.anthropic.com", "api.anthropic.com"));
  EXPECT_FALSE(HostInScope("notgithub.com", "github.com"));
  EXPECT_FALSE(HostInScope("github.com.evil", "github.com"));
  EXPECT_FALSE(HostInScope("anthropic.com", "api.anthropic.com"));
  EXPECT_FALSE(HostInScope(".github.com", "github.com"));
  EXPECT_FALSE(HostInScope("", "github.com"));
  EXPECT_FALSE(HostInScope("github.com", ""));
}

TEST(CredentialTest, DefaultsAndOverrides) {
  auto a = MakeCredential(CredentialKind::kAnthropic, "sk-ant-api03-abcdefgh\n", {}, "", false);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->value, "sk-ant-api03-abcdefgh");  // trailing newline from stdin dropped
  EXPECT_EQ(a->id, "anthropic");
  EXPECT_EQ(a->hosts, std::vector<std::string>{"api.anthropic.com"});

  auto g = MakeCredential(CredentialKind::kGithub, "ghp_0123456789", {"GHE.Example.COM."}, "",
                          false);
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(g->hosts, std::vector<std::string>{"ghe.example.com"});
}

TEST(CredentialTest, HeaderKindNeedsHeaderAndHost) {
  EXPECT_FALSE(MakeCredential(CredentialKind::kHeader, "abcdefghij", {"x.test"}, "", false).ok());
  EXPECT_FALSE(MakeCredential(CredentialKind::kHeader, "abcdefghij", {}, "X-Key", false).ok());
  EXPECT_FALSE(
      MakeCredential(CredentialKind::kHeader, "abcdefghij", {"x.test"}, "Host", false).ok());
  EXPECT_FALSE(
      MakeCredential(CredentialKind::kHeader, "abcdefghij", {"x.test"}, "X Key", false).ok());
  auto h = MakeCredential(CredentialKind::kHeader, "abcdefghij", {"x.test"}, "X-Key", true);
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(h->id, "header:x-key");
  EXPECT_EQ(h->header, "x-key");
  EXPECT_TRUE(h->body_substitution);
  EXPECT_FALSE(MakeCredential(CredentialKind::kOpenai, "abcdefghij", {}, "X-Key", false).ok());
}

TEST(CredentialTest, RejectsBadValuesAndHosts) {
  EXPECT_FALSE(MakeCredential(CredentialKind::kOpenai, "short", {}, "", false).ok());
  EXPECT_FALSE(MakeCredential(CredentialKind::kOpenai, "has space inside", {}, "", false).ok());
  EXPECT_FALSE(MakeCredential(CredentialKind::kOpenai, "line\nbreak12", {}, "", false).ok());
  EXPECT_FALSE(
      MakeCredential(CredentialKind::kOpenai, "abcdefghij", {"*.openai.com"}, "", false).ok());
  EXPECT_FALSE(
      MakeCredential(CredentialKind::kOpenai, "abcdefghij", {"api.openai.com:443"}, "", false)
          .ok());
  EXPECT_FALSE(
      MakeCredential(CredentialKind::kOpenai, "abcdefghij", {"https://x.test"}, "", false).ok());
  auto err = MakeCredential(CredentialKind::kOpenai, "secret value 123", {}, "", false);
  ASSERT_FALSE(err.ok());
  EXPECT_EQ(err.error().message().find("secret value"), std::string::npos);
}

}  // namespace
}  // namespace cloister::vault
