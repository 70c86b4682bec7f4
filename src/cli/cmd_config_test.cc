// `create --tool`, `config NAME [--tool] [--json]`, `run --tool` on an existing workspace, and the
// one-liner's key import (cli/vault_access.h), on real workspaces in a temp store.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <sstream>

#include "base/pid_file.h"
#include "cli/cli.h"
#include "cli/testing.h"
#include "cli/vault_access.h"
#include "store/store.h"
#include "vault/vault.h"

namespace cloister::cli {
namespace {

using testing::Outcome;

class ConfigCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = store_.root();
    ASSERT_TRUE(Env::Default()->Truncate(root_ + "/base.raw", 16 << 20).ok());
    setenv("CLOISTER_VAULT_KEY_BACKEND", "file", 1);
    unsetenv("ANTHROPIC_API_KEY");
    unsetenv("OPENAI_API_KEY");
  }

  Outcome Run(std::vector<std::string> args, const std::string& input = "") {
    return store_.Run(args, input);
  }
  Outcome Create(const std::string& name, std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {"create", name, "--image", root_ + "/base.raw", "--home-size", "64M"};
    args.insert(args.end(), extra.begin(), extra.end());
    return Run(args);
  }
  std::string Tool(const std::string& name) {
    auto store = Store::Open(root_);
    auto c = (*store)->LoadConfig(name);
    return c.ok() ? c->tool : "<" + c.error().message() + ">";
  }

  testing::TempStore store_{"config"};
  std::string root_;
};

TEST_F(ConfigCliTest, BrowserAutostartIsStoredShownAndChecked) {
  ASSERT_EQ(Create("a").code, 0);
  Outcome shown = Run({"config", "a", "--json"});
  ASSERT_EQ(shown.code, 0) << shown.err;
  EXPECT_EQ(shown.json()["browser_autostart"], "off") << shown.out;
  for (const char* value : {"on", "keep-profile", "off"}) {
    Outcome set = Run({"config", "a", "--browser-autostart", value});
    ASSERT_EQ(set.code, 0) << value << ": " << set.err;
    EXPECT_NE(set.out.find(std::string("browser: autostart ") + value), std::string::npos) << set.out;
    auto store = Store::Open(root_);
    auto c = (*store)->LoadConfig("a");
    ASSERT_TRUE(c.ok());
    const auto& b = c->extra["browser"];
    EXPECT_EQ(b["autostart"], std::string(value) != "off") << value;
    EXPECT_EQ(b["keep_profile"], std::string(value) == "keep-profile") << value;
  }
  Outcome bad = Run({"config", "a", "--browser-autostart", "yes"});
  EXPECT_NE(bad.code, 0);
  EXPECT_NE(bad.err.find("keep-profile"), std::string::npos) << bad.err;
}

TEST_F(ConfigCliTest, CreateStoresTheToolAndRefusesAnUnknownOne) {
  Outcome made = Create("a", {"--tool", "claude"});
  ASSERT_EQ(made.code, 0) << made.err;
  EXPECT_NE(made.out.find("tool:        claude"), std::string::npos) << made.out;
  EXPECT_EQ(Tool("a"), "claude");
  ASSERT_EQ(Create("b").code, 0);
  EXPECT_EQ(Tool("b"), "shell");
  Outcome bad = Create("c", {"--tool", "emacs"});
  EXPECT_EQ(bad.code, kExitUsage);
  EXPECT_NE(bad.err.find("unknown tool 'emacs'"), std::string::npos) << bad.err;
  EXPECT_NE(bad.err.find("shell, claude, codex"), std::string::npos) << bad.err;
  EXPECT_EQ(Tool("c").front(), '<');  // not created
}

TEST_F(ConfigCliTest, ARelativeVolumeIsTheFolderHere) {
  std::filesystem::create_directories(root_ + "/proj/sub");
  char here[4096];
  ASSERT_NE(getcwd(here, sizeof here), nullptr);
  ASSERT_EQ(chdir((root_ + "/proj").c_str()), 0);
  Outcome made = Create("dot", {"-v", ".", "-v", "sub/:/srv/sub:ro"});
  ASSERT_EQ(chdir(here), 0);
  ASSERT_EQ(made.code, 0) << made.err;
  auto store = Store::Open(root_);
  auto c = (*store)->LoadConfig("dot");
  ASSERT_TRUE(c.ok());
  ASSERT_EQ(c->volumes.size(), 2u);
  EXPECT_EQ(c->volumes[0].host, root_ + "/proj");
  EXPECT_EQ(c->volumes[0].guest, "/home/dev/proj");
  EXPECT_EQ(c->volumes[1].host, root_ + "/proj/sub");
  EXPECT_EQ(c->volumes[1].guest, "/srv/sub");
  EXPECT_TRUE(c->volumes[1].read_only);
}

TEST_F(ConfigCliTest, ConfigShowsAndChangesTheTool) {
  ASSERT_EQ(Create("dev").code, 0);
  Outcome shown = Run({"config", "dev"});
  ASSERT_EQ(shown.code, 0) << shown.err;
  EXPECT_NE(shown.out.find("tool:    shell\n"), std::string::npos) << shown.out;
  EXPECT_NE(shown.out.find("(stopped)"), std::string::npos) << shown.out;

  Outcome set = Run({"config", "dev", "--tool", "codex", "--json"});
  ASSERT_EQ(set.code, 0) << set.err;
  auto j = nlohmann::json::parse(set.out, nullptr, false);
  ASSERT_TRUE(j.is_object()) << set.out;
  EXPECT_EQ(j["tool"], "codex");
  EXPECT_EQ(j["tool_package"], "@openai/codex@0.171.0");
  EXPECT_NE(set.err.find("tool shell -> codex; installed in the guest at its next start"),
            std::string::npos) << set.err;
  EXPECT_EQ(Tool("dev"), "codex");

  Outcome bad = Run({"config", "dev", "--tool", "vim"});
  EXPECT_EQ(bad.code, kExitUsage);
  EXPECT_NE(bad.err.find("Hint: use one of: shell, claude, codex"), std::string::npos) << bad.err;
  EXPECT_EQ(Tool("dev"), "codex");
  EXPECT_EQ(Run({"config", "ghost"}).code, kExitError);

  auto store = Store::Open(root_);
  ASSERT_TRUE(store.ok());
  {
    // Another verb holds the workspace lock and no VM runs: refused, unchanged.
    auto lock = (*store)->LockWorkspace("dev");
    ASSERT_TRUE(lock.ok());
    Outcome busy = Run({"config", "dev", "--tool", "claude"});
    EXPECT_EQ(busy.code, kExitError);
    EXPECT_NE(busy.err.find("busy"), std::string::npos) << busy.err;
    EXPECT_EQ(Tool("dev"), "codex");
    // The lock is a running VM's supervisor's (its pid file claimed): changed under the config
    // lock, for the next start, and the verb says so.
    WorkspacePaths paths = (*store)->Paths("dev");
    std::filesystem::create_directories(paths.run_dir);
    Result<int> claimed = ClaimPidFile(paths.supervisor_pid);
    ASSERT_TRUE(claimed.ok()) << claimed.error().ToString();
    Outcome running = Run({"config", "dev", "--tool", "claude"});
    EXPECT_EQ(running.code, 0) << running.err;
    EXPECT_NE(running.err.find("the VM is running: this applies at its next start"),
              std::string::npos) << running.err;
    EXPECT_EQ(Tool("dev"), "claude");
    close(*claimed);
    std::filesystem::remove(paths.supervisor_pid);
  }
}

TEST_F(ConfigCliTest, RunRefusesAnotherToolForAnExistingWorkspace) {
  ASSERT_EQ(Create("dev", {"--tool", "claude"}).code, 0);
  Outcome r = Run({"run", "dev", "--tool", "codex", "--", "true"});
  EXPECT_EQ(r.code, kExitUsage);
  EXPECT_NE(r.err.find("workspace dev runs claude, not codex"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("cloister config dev --tool codex"), std::string::npos) << r.err;
}

TEST_F(ConfigCliTest, TheOneLinerTakesTheAgentsKeyFromTheEnvironmentIntoTheVault) {
  ASSERT_EQ(Create("dev", {"--tool", "claude"}).code, 0);
  ASSERT_EQ(Create("sh").code, 0);
  std::ostringstream out, err;
  std::istringstream in;
  Cli cli(out, err, in);
  cli.store_flag() = root_;
  // No variable: nothing.
  auto none = ImportToolKeyFromEnv(cli, "dev", "claude");
  ASSERT_TRUE(none.ok()) << none.error().ToString();
  EXPECT_FALSE(*none);
  const std::string real = "sk-ant-api03-FROMxTHExENVIRONMENT0123456789abcdefghijklmnopqrstuvwxyzAA";
  setenv("ANTHROPIC_API_KEY", real.c_str(), 1);
  auto shell = ImportToolKeyFromEnv(cli, "sh", "shell");  // a shell takes no key
  ASSERT_TRUE(shell.ok());
  EXPECT_FALSE(*shell);
  auto added = ImportToolKeyFromEnv(cli, "dev", "claude");
  ASSERT_TRUE(added.ok()) << added.error().ToString();
  EXPECT_TRUE(*added);
  EXPECT_NE(err.str().find("ANTHROPIC_API_KEY from your environment"), std::string::npos);
  EXPECT_EQ(err.str().find("FROMxTHE"), std::string::npos) << "the value is never printed";
  auto store = Store::Open(root_);
  WorkspacePaths paths = (*store)->Paths("dev");
  auto v = vault::Vault::Open({root_ + "/keys", paths.secrets, "dev"});
  ASSERT_TRUE(v.ok());
  ASSERT_NE(v->Find("anthropic"), nullptr);
  EXPECT_EQ(v->Find("anthropic")->value, real);
  // A credential the workspace already has wins.
  setenv("ANTHROPIC_API_KEY", "sk-ant-api03-another", 1);
  auto again = ImportToolKeyFromEnv(cli, "dev", "claude");
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE(*again);
  unsetenv("ANTHROPIC_API_KEY");
}

}  // namespace
}  // namespace cloister::cli
