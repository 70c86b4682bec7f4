// The guest's credentials files, as BuildGuestCredentials writes them from a login in custody,
// read by the pinned clients' own credential-loading code: `claude auth status` (Claude Code
// 2.1.332) and `codex login status` (Codex 0.171.0), from the npm tarball cache, each in a network
// namespace of its own (`unshare -n`: no traffic can leave). A control with a broken file shows
// each check can fail.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "base/subprocess.h"
#include "image/npm_tarball.h"
#include "oauth/custody.h"
#include "oauth/test_util.h"
#include "oauth/wiring.h"
#include "vault/guest_files.h"

namespace cloister::oauth {
namespace {

namespace fs = std::filesystem;
using testing::FakeProvider;
using testing::TempVault;

class OauthClientsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/cloister-oauth-clients-XXXXXX";
    dir_ = mkdtemp(tmpl);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Extracts `member` of the cached tarball `tgz` and returns its path.
  std::string Extract(const std::string& tgz, const std::string& member) {
    std::string path = image::NpmCacheDir() + "/" + tgz;
    EXPECT_TRUE(fs::exists(path)) << path << " missing (scripts/install-deps.sh test caches it)";
    RunOptions o;
    o.timeout = std::chrono::minutes(5);
    auto r = RunProcess({"tar", "xzf", path, "-C", dir_, member}, o);
    EXPECT_TRUE(r.ok() && r->exit_code == 0) << (r.ok() ? r->err : r.error().ToString());
    return dir_ + "/" + member;
  }

  // Runs `argv` with HOME (and CODEX_HOME) = `home`, in a new network namespace.
  std::string Run(const std::string& home, std::vector<std::string> argv) {
    argv.insert(argv.begin(), {"unshare", "-n"});
    RunOptions o;
    o.env_set = {{"HOME", home}, {"CODEX_HOME", home + "/.codex"}};
    o.env_unset = {"CLAUDE_CONFIG_DIR", "ANTHROPIC_API_KEY", "OPENAI_API_KEY",
                   "CLAUDE_CODE_OAUTH_TOKEN"};
    o.timeout = std::chrono::minutes(2);
    auto r = RunProcess(argv, o);
    EXPECT_TRUE(r.ok());
    return r.ok() ? r->out + r->err : "";
  }

  // Writes the guest files of `bound` under a fresh home and returns it.
  std::string Home(const std::string& name, const vault::BoundCredential& bound) {
    std::string home = dir_ + "/" + name;
    for (const auto& f : vault::BuildGuestCredentials({bound}).files) {
      fs::create_directories(fs::path(home + "/" + f.path).parent_path());
      std::ofstream(home + "/" + f.path) << f.content;
      fs::permissions(home + "/" + f.path, static_cast<fs::perms>(f.mode));
    }
    return home;
  }

  std::string dir_;
};

TEST_F(OauthClientsTest, ClaudeCodeReadsThePlaceholderLoginAsASubscriptionLogin) {
  std::string claude = Extract("anthropic-ai-claude-code-linux-x64-2.1.332.tgz", "package/claude");
  FakeProvider p(false);
  TempVault tv;
  vault::BoundCredential b = tv.Import(p, false);
  std::string out = Run(Home("good", b), {claude, "auth", "status"});
  auto j = nlohmann::json::parse(out.substr(out.find('{')), nullptr, false);
  ASSERT_TRUE(j.is_object()) << out;
  EXPECT_EQ(j["loggedIn"], true) << out;
  EXPECT_EQ(j["authMethod"], "claude.ai") << out;
  EXPECT_EQ(j["subscriptionType"], "max") << out;
  // Control: without user:inference the same client says logged out.
  b.credential.oauth.scopes = {"user:profile"};
  std::string bad = Run(Home("bad", b), {claude, "auth", "status"});
  EXPECT_NE(bad.find("\"loggedIn\": false"), std::string::npos) << bad;
}

// A login captured in the guest has no plan (the token answer does not carry one): at the next
// boot its guest file (from the vault, subscriptionType null) is still a claude.ai login to the
// client's own loader.
TEST_F(OauthClientsTest, ClaudeCodeReadsACapturedLoginAtTheNextBoot) {
  std::string claude = Extract("anthropic-ai-claude-code-linux-x64-2.1.332.tgz", "package/claude");
  FakeProvider p(false);
  TempVault tv;
  auto v = vault::Vault::Open(tv.loc, vault::KeyBackend::kFile);
  ASSERT_TRUE(v.ok());
  auto slots = v->BindCaptureSlots();
  ASSERT_TRUE(slots.ok());
  LoginCustody slot(slots->front(), nullptr, nullptr, nullptr,
                    VaultPersister(tv.loc, vault::KeyBackend::kFile, "", true));
  auto [status, answer] = p.Exchange(
      R"({"grant_type":"authorization_code","code":"c","code_verifier":"v"})");
  ASSERT_EQ(status, 200) << answer;
  ASSERT_TRUE(slot.CaptureLogin(answer).ok());
  auto again = vault::Vault::Open(tv.loc, vault::KeyBackend::kFile);
  ASSERT_TRUE(again.ok());
  auto bound = again->Bind();
  ASSERT_TRUE(bound.ok());
  ASSERT_EQ(bound->size(), 1u);
  EXPECT_TRUE(bound->front().credential.oauth.plan.empty());
  std::string out = Run(Home("captured", bound->front()), {claude, "auth", "status"});
  auto j = nlohmann::json::parse(out.substr(std::min(out.find('{'), out.size())), nullptr, false);
  ASSERT_TRUE(j.is_object()) << out;
  EXPECT_EQ(j["loggedIn"], true) << out;
  EXPECT_EQ(j["authMethod"], "claude.ai") << out;
}

TEST_F(OauthClientsTest, CodexReadsThePlaceholderLoginAsAChatgptLogin) {
  std::string codex = Extract("openai-codex-0.171.0-linux-x64.tgz",
                              "package/vendor/x86_64-unknown-linux-musl/bin/codex");
  FakeProvider p(true);
  TempVault tv;
  vault::BoundCredential b = tv.Import(p, true);
  std::string out = Run(Home("good", b), {codex, "login", "status"});
  EXPECT_NE(out.find("Logged in using ChatGPT"), std::string::npos) << out;
  // Control: an id token that is not a JWT is refused by the same loader.
  b.id_token_placeholder = "not-a-jwt";
  std::string bad = Run(Home("bad", b), {codex, "login", "status"});
  EXPECT_EQ(bad.find("Logged in using ChatGPT"), std::string::npos) << bad;
}

}  // namespace
}  // namespace cloister::oauth
