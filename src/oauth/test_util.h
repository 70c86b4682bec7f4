// Shared pieces of the oauth tests: a temp workspace vault holding a login the fake provider
// issued. Tests only.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <string>

#include "oauth/fake_provider.h"
#include "oauth/host_login.h"
#include "vault/vault.h"

namespace cloister::oauth::testing {

// `claude`: a Claude Code credentials file holding `access`/`refresh`.
inline std::string ClaudeFile(const std::string& access, const std::string& refresh,
                              int64_t expires_ms = 1900000000000) {
  return R"({"claudeAiOauth":{"accessToken":")" + access + R"(","refreshToken":")" + refresh +
         R"(","expiresAt":)" + std::to_string(expires_ms) +
         R"(,"scopes":["user:inference","user:profile","user:sessions:claude_code"],)"
         R"("subscriptionType":"max","rateLimitTier":"default_claude_max_20x"}})";
}

inline std::string CodexFile(const std::string& id, const std::string& access,
                             const std::string& refresh) {
  return R"({"OPENAI_API_KEY":null,"tokens":{"id_token":")" + id + R"(","access_token":")" +
         access + R"(","refresh_token":")" + refresh +
         R"(","account_id":"acct-fake-1"},"last_refresh":"2026-11-30T10:00:00Z"})";
}

class TempVault {
 public:
  explicit TempVault(const std::string& workspace = "ws") {
    char tmpl[] = "/tmp/cloister-oauth-XXXXXX";
    dir = mkdtemp(tmpl);
    std::filesystem::create_directories(dir + "/keys");
    std::filesystem::create_directories(dir + "/" + workspace);
    loc = {dir + "/keys", dir + "/" + workspace + "/secrets.enc", workspace};
  }
  ~TempVault() { std::filesystem::remove_all(dir); }

  // Imports the fake provider's current login into the vault; returns the bound credential.
  vault::BoundCredential Import(FakeProvider& p, bool jwt) {
    auto cred = jwt ? LoginFromCodexFile(CodexFile(p.id_token(), p.access(), p.refresh()), 1800000000)
                    : LoginFromClaudeFile(ClaudeFile(p.access(), p.refresh()), "", 1800000000);
    EXPECT_TRUE(cred.ok()) << cred.error().ToString();
    auto v = vault::Vault::Open(loc, vault::KeyBackend::kFile);
    EXPECT_TRUE(v.ok());
    v->Put(*cred);
    EXPECT_TRUE(v->Save().ok());
    auto bound = v->Bind();
    EXPECT_TRUE(bound.ok());
    return bound->front();
  }
  vault::Credential Stored(const std::string& id) {
    auto v = vault::Vault::Open(loc, vault::KeyBackend::kFile);
    EXPECT_TRUE(v.ok()) << v.error().ToString();
    const vault::Credential* c = v->Find(id);
    EXPECT_NE(c, nullptr);
    return c ? *c : vault::Credential{};
  }

  std::string dir;
  vault::VaultLocation loc;
};

}  // namespace cloister::oauth::testing
