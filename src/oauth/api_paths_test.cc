#include "oauth/api_paths.h"

#include <gtest/gtest.h>

namespace cloister::oauth {
namespace {

using vault::CredentialKind;

// SECURITY (issue 37 item 4): a login's token is used only on its client's own paths, a path the
// user allowed, and never on a path that mints a credential or that is not plain.
TEST(ApiPathsTest, OnlyTheClientsPathsAndNeverMinting) {
  const auto claude = CredentialKind::kClaudeSubscription;
  const auto codex = CredentialKind::kChatgptSubscription;
  EXPECT_EQ(CheckApiPath(claude, {}, "/v1/messages?beta=true"), PathVerdict::kAllowed);
  EXPECT_EQ(CheckApiPath(claude, {}, "/v1/messages/count_tokens?beta=true"), PathVerdict::kAllowed);
  EXPECT_EQ(CheckApiPath(claude, {}, "/api/oauth/profile"), PathVerdict::kAllowed);
  EXPECT_EQ(CheckApiPath(codex, {}, "/backend-api/codex/responses"), PathVerdict::kAllowed);
  EXPECT_EQ(CheckApiPath(codex, {}, "/backend-api/wham/accounts/check"), PathVerdict::kAllowed);
  EXPECT_EQ(CheckApiPath(codex, {}, "/backend-api/wham/tasks"), PathVerdict::kNotAllowed);
  EXPECT_EQ(CheckApiPath(codex, {}, "/v1/messages"), PathVerdict::kNotAllowed);
  for (const char* p : {"/v1/mcp_servers", "/v1/mcp_servers?limit=10", "/v1/files",
                        "/api/oauth/account/settings", "/api/oauth/organizations/x/plugins",
                        "/v1/messages/batches", "/v1/messagesx"}) {
    EXPECT_EQ(CheckApiPath(claude, {}, p), PathVerdict::kNotAllowed) << p;
  }
  for (const char* p : {"/api/oauth/claude_cli/create_api_key", "/API/OAUTH/CLAUDE_CLI/CREATE_API_KEY",
                        "/x/create_api_key/y"}) {
    EXPECT_EQ(CheckApiPath(claude, {p}, p), PathVerdict::kMinting) << p;
    EXPECT_EQ(CheckApiPath(claude, {"/x/*", "/API/*"}, p), PathVerdict::kMinting) << p;
  }
  for (const char* p : {"", "v1/messages", "/v1/messages/../x", "/v1/./messages", "//v1/messages",
                        "/v1/messages/", "/v1/%6Dessages", "/v1\\messages", "/v1/messages#x",
                        "/v1/mess ages"}) {
    EXPECT_EQ(CheckApiPath(claude, {}, p), PathVerdict::kMalformed) << p;
  }
  // The user's own paths: exact, or everything below a prefix (not the prefix itself).
  EXPECT_EQ(CheckApiPath(claude, {"/v1/files"}, "/v1/files"), PathVerdict::kAllowed);
  EXPECT_EQ(CheckApiPath(claude, {"/v1/files"}, "/v1/files/abc"), PathVerdict::kNotAllowed);
  EXPECT_EQ(CheckApiPath(claude, {"/v1/files/*"}, "/v1/files/abc"), PathVerdict::kAllowed);
  EXPECT_EQ(CheckApiPath(claude, {"/v1/files/*"}, "/v1/files"), PathVerdict::kNotAllowed);
  EXPECT_EQ(CheckApiPath(claude, {"/v1/files/*"}, "/v1/filesx/a"), PathVerdict::kNotAllowed);
}

TEST(ApiPathsTest, WhatAUserMayAllow) {
  const auto claude = CredentialKind::kClaudeSubscription;
  EXPECT_TRUE(ParseAllowedPath(claude, "/v1/files").ok());
  EXPECT_TRUE(ParseAllowedPath(claude, "/v1/files/*").ok());
  for (const char* p : {"", "/", "/*", "v1", "/v1/../x", "/v1?x=1", "/v1/%41", "/a/create_api_key",
                        "/x//y"}) {
    EXPECT_FALSE(ParseAllowedPath(claude, p).ok()) << p;
  }
  EXPECT_NE(ParseAllowedPath(claude, "/api/oauth/claude_cli/create_api_key").error().message().find(
                "never allowed"),
            std::string::npos);
}

TEST(ApiPathsTest, MintingScopesAreStripped) {
  std::vector<std::string> stripped;
  auto kept = WithoutMintingScopes({"org:create_api_key", "user:profile", "user:inference"}, &stripped);
  EXPECT_EQ(kept, (std::vector<std::string>{"user:profile", "user:inference"}));
  EXPECT_EQ(stripped, std::vector<std::string>{"org:create_api_key"});
  for (const ApiPath& p : DefaultApiPaths(CredentialKind::kClaudeSubscription)) {
    EXPECT_NE(std::string(p.why), "") << p.path;  // each path says where it came from
  }
}

}  // namespace
}  // namespace cloister::oauth
