#include "vault/credential_shape.h"

#include <gtest/gtest.h>

namespace cloister::vault {
namespace {

TEST(CredentialShapeTest, KnownShapes) {
  EXPECT_EQ(CredentialShape("sk-ant-api03-" + std::string(30, 'x')), "an Anthropic key (sk-ant-api03-...)");
  EXPECT_EQ(CredentialShape("ghp_" + std::string(36, 'x')), "a GitHub token (ghp_...)");
  EXPECT_EQ(CredentialShape("token=glpat-" + std::string(20, 'x')), "a GitLab token (glpat-...)");
  EXPECT_EQ(CredentialShape("ASIAABCDEFGHIJKLMNOP"), "an AWS access key id (ASIA...)");
  EXPECT_EQ(CredentialShape("xoxp-abcdefghijk"), "a Slack token (xoxp-...)");
  EXPECT_TRUE(CredentialShape("a.eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.c2lnbmF0dXJl"));
  EXPECT_TRUE(CredentialShape("-----BEGIN RSA PRIVATE KEY-----\nMII...\n"));
}

TEST(CredentialShapeTest, OrdinaryValuesPass) {
  for (const char* v : {"", "development", "/usr/local/bin:/usr/bin", "task-runner-configuration-x",
                        "sk-short", "ghp_short", "AKIA-not-a-key", "eyJ.eyJ.x", "-----BEGIN CERTIFICATE-----",
                        "postgres://postgres:postgres@localhost:5432/db", "1.22.5"}) {
    EXPECT_FALSE(CredentialShape(v)) << v;
  }
}

TEST(CredentialShapeTest, NameRule) {
  EXPECT_TRUE(CredentialShape("API_TOKEN", "abcdefghij0123456789"));
  EXPECT_TRUE(CredentialShape("db_password", "Zx81kkQp02mmRt77vvYw"));
  EXPECT_FALSE(CredentialShape("DB_PASSWORD", "postgres"));               // short
  EXPECT_FALSE(CredentialShape("DB_PASSWORD", "correct horse battery staple x"));  // spaces
  EXPECT_FALSE(CredentialShape("TOKEN_URL", "https://example.com/oauth/token"));  // no digit
  EXPECT_FALSE(CredentialShape("GOFLAGS", "abcdefghij0123456789"));        // not a secret name
}

TEST(CredentialShapeTest, LinearOnRepetitiveInput) {
  std::string v;
  for (int i = 0; i < 20000; ++i) v += "sk-";
  EXPECT_TRUE(CredentialShape(v));  // every search is linear: this returns at once
  std::string jwtish;
  for (int i = 0; i < 20000; ++i) jwtish += "eyJ.";
  EXPECT_FALSE(CredentialShape(jwtish));
}

}  // namespace
}  // namespace cloister::vault
