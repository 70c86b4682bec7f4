// `cloister cred import NAME claude|codex`, the login columns of `cred ls`, `cred rm` of a login,
// and the refusal to put one login into two workspaces.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <iterator>

#include "cli/testing.h"
#include "oauth/test_util.h"
#include "vault/vault.h"

namespace cloister::cli {
namespace {

using testing::Outcome;

class CredImportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(store_.CreateWorkspace("dev"), "");
    ASSERT_EQ(store_.CreateWorkspace("other"), "");
    setenv("CLOISTER_VAULT_KEY_BACKEND", "file", 1);
    file_ = store_.root() + "/host-credentials.json";
    std::ofstream(file_) << oauth::testing::ClaudeFile(provider_.access(), provider_.refresh());
  }
  Outcome Run(std::vector<std::string> args) { return store_.Run(args, ""); }

  testing::TempStore store_{"credimport"};
  oauth::testing::FakeProvider provider_{false};
  std::string file_;
};

TEST_F(CredImportTest, ImportListsTheLoginAndNeverPrintsATokenThenRmForgetsIt) {
  Outcome imp = Run({"cred", "import", "dev", "claude", "--from", file_});
  ASSERT_EQ(imp.code, 0) << imp.err;
  EXPECT_NE(imp.out.find("will have to log in again"), std::string::npos) << imp.out;
  Outcome ls = Run({"cred", "ls", "dev", "--json"});
  ASSERT_EQ(ls.code, 0) << ls.err;
  for (const std::string& t : provider_.issued()) {
    EXPECT_EQ(imp.out.find(t), std::string::npos);
    EXPECT_EQ(ls.out.find(t), std::string::npos);
  }
  auto doc = nlohmann::json::parse(ls.out);
  ASSERT_EQ(doc["credentials"].size(), 1u);
  const auto& c = doc["credentials"][0];
  EXPECT_EQ(c["kind"], "claude-subscription");
  EXPECT_EQ(c["login"]["plan"], "max");
  EXPECT_EQ(c["login"]["expires_at"], "2030-03-17T17:46:40Z");
  EXPECT_NE(c["login"]["last_refresh"], "-");
  EXPECT_EQ(c["placeholder"].get<std::string>().rfind("sk-ant-oat01-CLOISTER", 0), 0u);
  Outcome text = Run({"cred", "ls", "dev"});
  EXPECT_NE(text.out.find("login - max expires 2030-03-17T17:46:40Z"), std::string::npos)
      << text.out;

  Outcome rm = Run({"cred", "rm", "dev", "claude-subscription", "--yes"});
  ASSERT_EQ(rm.code, 0) << rm.err;
  Outcome after = Run({"cred", "ls", "dev", "--json"});
  EXPECT_EQ(nlohmann::json::parse(after.out)["credentials"].size(), 0u);
}

// The refresh record the running workspace saves (oauth/custody.h): a failed refresh and a
// refresh sent but never saved (a crash) are shown, with the way out.
TEST_F(CredImportTest, LsShowsAFailedAndAnInterruptedRefresh) {
  ASSERT_EQ(Run({"cred", "import", "dev", "claude", "--from", file_}).code, 0);
  Outcome before = Run({"cred", "ls", "dev"});
  EXPECT_EQ(before.out.find("refresh failed"), std::string::npos) << before.out;
  EXPECT_EQ(before.out.find("not saved"), std::string::npos) << before.out;
  {
    vault::VaultLocation loc{store_.root() + "/keys", store_.root() + "/workspaces/dev/secrets.enc",
                             "dev"};
    auto v = vault::Vault::Open(loc, vault::KeyBackend::kFile);
    ASSERT_TRUE(v.ok()) << v.error().ToString();
    vault::Credential c = *v->Find("claude-subscription");
    c.oauth.refresh_error = "refused by the provider (HTTP 400); if it persists, log in again";
    c.oauth.refresh_error_at = 1800000000;
    c.oauth.refresh_started_at = 1800000100;
    v->Put(c);
    ASSERT_TRUE(v->Save().ok());
  }
  Outcome text = Run({"cred", "ls", "dev"});
  EXPECT_NE(text.out.find("refresh failed 2027-01-15T08:00:00Z: refused by the provider (HTTP 400)"),
            std::string::npos) << text.out;
  EXPECT_NE(text.out.find("refresh sent 2027-01-15T08:01:40Z and not saved"), std::string::npos)
      << text.out;
  auto doc = nlohmann::json::parse(Run({"cred", "ls", "dev", "--json"}).out);
  const auto& l = doc["credentials"][0]["login"];
  EXPECT_EQ(l["source"], "import");
  EXPECT_EQ(l["refresh_pending_since"], "2027-01-15T08:01:40Z");
  EXPECT_NE(l["refresh_error"].get<std::string>().find("HTTP 400"), std::string::npos);
}

// The provider rotates refresh tokens: two workspaces refreshing one login would log each other
// out, so the second import of the same host login is refused with the way out.
TEST_F(CredImportTest, TheSameLoginIsRefusedInASecondWorkspace) {
  ASSERT_EQ(Run({"cred", "import", "dev", "claude", "--from", file_}).code, 0);
  Outcome second = Run({"cred", "import", "other", "claude", "--from", file_});
  EXPECT_NE(second.code, 0);
  EXPECT_NE(second.err.find("already in the custody of workspace dev"), std::string::npos)
      << second.err;
  EXPECT_NE(second.err.find("cred rm dev claude-subscription"), std::string::npos) << second.err;
  EXPECT_EQ(nlohmann::json::parse(Run({"cred", "ls", "other", "--json"}).out)["credentials"].size(),
            0u);
  // Re-importing into the same workspace replaces its login (no refusal).
  EXPECT_EQ(Run({"cred", "import", "dev", "claude", "--from", file_}).code, 0);
  // A new host login (new tokens) goes into the second workspace.
  oauth::testing::FakeProvider fresh(false);
  fresh.MintAccess();
  std::ofstream(file_) << oauth::testing::ClaudeFile(fresh.MintAccess(), fresh.MintRefresh());
  Outcome ok = Run({"cred", "import", "other", "claude", "--from", file_});
  EXPECT_EQ(ok.code, 0) << ok.err;
}

TEST_F(CredImportTest, RefusesWhatIsNotALoginWithTheFix) {
  std::ofstream(file_) << "{}";
  Outcome o = Run({"cred", "import", "dev", "claude", "--from", file_});
  EXPECT_NE(o.code, 0);
  EXPECT_NE(o.err.find("/login"), std::string::npos) << o.err;
  Outcome p = Run({"cred", "import", "dev", "gemini", "--from", file_});
  EXPECT_NE(p.code, 0);
  EXPECT_NE(p.err.find("claude"), std::string::npos) << p.err;
  Outcome add = store_.Run({"cred", "add", "dev", "claude-subscription"}, "sk-ant-oat01-xxxxxxxxxx\n");
  EXPECT_NE(add.code, 0);
  EXPECT_NE(add.err.find("cred import"), std::string::npos) << add.err;
}

// SECURITY (issue 37 items 1 and 4): a login's policy (ask, allowed paths) is set by `cred
// policy` only: importing the login again keeps it (a re-import used to reset ask to off); the
// minting scope a login file lists is not kept; a path that mints is never allowed.
TEST_F(CredImportTest, ReimportKeepsThePolicyAndDropsTheMintingScope) {
  std::string minting = file_ + ".minting";
  std::string text = oauth::testing::ClaudeFile(provider_.access(), provider_.refresh());
  text.replace(text.find(R"("scopes":[)"), 10, R"("scopes":["org:create_api_key",)");
  std::ofstream(minting) << text;
  ASSERT_EQ(Run({"cred", "import", "dev", "claude", "--from", minting}).code, 0);
  Outcome set = Run({"cred", "policy", "dev", "claude-subscription", "--ask", "always",
                     "--allow-path", "/v1/files/*"});
  ASSERT_EQ(set.code, 0) << set.err;
  EXPECT_NE(set.out.find("claude-subscription allowed path: /v1/files/*"), std::string::npos)
      << set.out;
  Outcome mint = Run({"cred", "policy", "dev", "claude-subscription", "--allow-path",
                      "/api/oauth/claude_cli/create_api_key"});
  EXPECT_NE(mint.code, 0);
  EXPECT_NE(mint.err.find("never allowed"), std::string::npos) << mint.err;
  Outcome absent = Run({"cred", "policy", "dev", "claude-subscription", "--remove-path", "/x"});
  EXPECT_NE(absent.code, 0);

  // The same login imported again (the user logged in on the host once more): policy kept.
  ASSERT_EQ(Run({"cred", "import", "dev", "claude", "--from", minting}).code, 0);
  Outcome ls = Run({"cred", "ls", "dev", "--json"});
  ASSERT_EQ(ls.code, 0) << ls.err;
  const auto c = nlohmann::json::parse(ls.out)["credentials"][0];
  EXPECT_EQ(c["ask"], "always") << ls.out;
  EXPECT_EQ(c["allow_paths"], nlohmann::json::array({"/v1/files/*"})) << ls.out;
  for (const auto& scope : c["login"]["scopes"]) EXPECT_NE(scope, "org:create_api_key") << ls.out;
  EXPECT_FALSE(c["login"]["scopes"].empty());
  Outcome text_ls = Run({"cred", "ls", "dev"});
  EXPECT_NE(text_ls.out.find("  ask: always"), std::string::npos) << text_ls.out;
  EXPECT_NE(text_ls.out.find("  also used on: /v1/files/*"), std::string::npos) << text_ls.out;
}

}  // namespace
}  // namespace cloister::cli
