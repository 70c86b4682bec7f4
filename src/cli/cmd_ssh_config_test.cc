// IDE access's host side through the real verbs, in-process with a temp store: `create` makes
// the workspace's sshd host key, `ssh-config` prints the block and pins it (and makes the store's
// client key, which OpenSSH's own ssh-keygen reads), `wipe` replaces the host key so the pin and
// `cloister ssh` refuse until ssh-config runs again, `wipe-home` keeps it, `--install` adds one
// Include to ~/.ssh/config and keeps other workspaces' blocks.
#include <stdlib.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "base/strings.h"
#include "base/subprocess.h"
#include "base/testing_file.h"
#include "cli/testing.h"
#include "sshagent/ide_keys.h"

namespace cloister::cli {
namespace {

namespace fs = std::filesystem;

using testfile::Slurp;

class SshConfigCliTest : public testing::SparseBaseTest {
 protected:
  SshConfigCliTest() : SparseBaseTest("/tmp/cloister-sshcfg-cli.") {}
  void SetUp() override {
    SparseBaseTest::SetUp();
    setenv("CLOISTER_VAULT_KEY_BACKEND", "file", 1);
    const char* h = getenv("HOME");
    old_home_ = h ? h : "";
    setenv("HOME", (dir_ + "/home").c_str(), 1);
    fs::create_directories(dir_ + "/home");
  }
  void TearDown() override {
    setenv("HOME", old_home_.c_str(), 1);
    SparseBaseTest::TearDown();
  }
  std::string Ws(const std::string& n) { return store_ + "/workspaces/" + n; }
  std::string old_home_;
};

TEST_F(SshConfigCliTest, PrintsPinsAndRefusesAWipedHostKeyUntilRepinned) {
  ASSERT_EQ(Create("ws").code, 0);
  std::string host_key = Ws("ws") + "/ssh/" + sshagent::kSshdHostKeyFile;
  ASSERT_TRUE(fs::exists(host_key)) << "create made no sshd host key";
  std::string host_pub = Slurp(host_key + ".pub");

  auto out = Run({"ssh-config", "ws"});
  ASSERT_EQ(out.code, 0) << out.err;
  EXPECT_NE(out.out.find("Host ws.cloister\n  User dev\n  ProxyCommand '"), std::string::npos) << out.out;
  EXPECT_NE(out.out.find("' --store '" + store_ + "' _ssh-stdio 'ws'\n"), std::string::npos) << out.out;
  EXPECT_NE(out.out.find("  IdentityFile \"" + store_ + "/keys/ssh-client\"\n"), std::string::npos);
  EXPECT_NE(out.out.find("  UserKnownHostsFile \"" + Ws("ws") + "/ssh/known_hosts\"\n"), std::string::npos);
  EXPECT_NE(out.out.find("  StrictHostKeyChecking yes\n"), std::string::npos);
  EXPECT_NE(out.out.find("  ForwardAgent no\n"), std::string::npos);
  EXPECT_NE(out.err.find("made the store's SSH client key"), std::string::npos) << out.err;
  // The pin is the workspace's host key.
  std::vector<std::string> pub = Split(Trim(host_pub), ' ');
  ASSERT_GE(pub.size(), 2u);
  EXPECT_EQ(Slurp(Ws("ws") + "/ssh/known_hosts"), "ws.cloister " + pub[0] + " " + pub[1] + "\n");
  // The client key: private 0600, readable by OpenSSH itself.
  std::string client = store_ + "/keys/ssh-client";
  struct stat st{};
  ASSERT_EQ(stat(client.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  if (ProgramExists("ssh-keygen")) {
    auto y = RunProcess({"ssh-keygen", "-y", "-f", client});
    ASSERT_TRUE(y.ok());
    EXPECT_EQ(y->exit_code, 0) << y->err;
    std::vector<std::string> cp = Split(Trim(Slurp(client + ".pub")), ' ');
    EXPECT_NE(y->out.find(cp[0] + " " + cp[1]), std::string::npos) << y->out;
  }
  // A second run makes no new client key.
  auto again = Run({"ssh-config", "ws"});
  ASSERT_EQ(again.code, 0);
  EXPECT_EQ(again.err.find("made the store's SSH client key"), std::string::npos);

  // wipe-home keeps the host key; wipe replaces it and the pin stops matching.
  ASSERT_EQ(Run({"wipe-home", "ws", "--yes"}).code, 0);
  EXPECT_EQ(Slurp(host_key + ".pub"), host_pub);
  EXPECT_TRUE(sshagent::CheckSshdHostPin("ws", Ws("ws")).ok());
  ASSERT_EQ(Run({"wipe", "ws", "--yes"}).code, 0);
  EXPECT_NE(Slurp(host_key + ".pub"), host_pub);
  Status pinned = sshagent::CheckSshdHostPin("ws", Ws("ws"));
  EXPECT_FALSE(pinned.ok());
  // `cloister ssh` refuses before running ssh, with the fix.
  if (ProgramExists("ssh")) {
    auto ssh = Run({"ssh", "ws", "--", "true"});
    EXPECT_NE(ssh.code, 0);
    EXPECT_NE(ssh.err.find("cloister ssh-config ws"), std::string::npos) << ssh.err;
  }
  ASSERT_EQ(Run({"ssh-config", "ws"}).code, 0);
  EXPECT_TRUE(sshagent::CheckSshdHostPin("ws", Ws("ws")).ok());
}

TEST_F(SshConfigCliTest, EveryWorkspaceByDefaultAndUnknownNamesRefused) {
  ASSERT_EQ(Create("a").code, 0);
  ASSERT_EQ(Create("b").code, 0);
  auto out = Run({"ssh-config"});
  ASSERT_EQ(out.code, 0) << out.err;
  EXPECT_NE(out.out.find("Host a.cloister\n"), std::string::npos);
  EXPECT_NE(out.out.find("Host b.cloister\n"), std::string::npos);
  auto bad = Run({"ssh-config", "nope"});
  EXPECT_NE(bad.code, 0);
  EXPECT_EQ(bad.out, "");
}

TEST_F(SshConfigCliTest, InstallIncludesOnceAndKeepsOtherWorkspacesBlocks) {
  ASSERT_EQ(Create("a").code, 0);
  ASSERT_EQ(Create("b").code, 0);
  std::string user_config = dir_ + "/home/.ssh/config";
  fs::create_directories(dir_ + "/home/.ssh");
  std::ofstream(user_config) << "Host github.com\n  User git\n";
  auto first = Run({"ssh-config", "a", "--install"});
  ASSERT_EQ(first.code, 0) << first.err;
  EXPECT_NE(first.out.find("now includes it"), std::string::npos) << first.out;
  std::string inc = "Include \"" + store_ + "/ssh_config\"";
  std::string text = Slurp(user_config);
  EXPECT_LT(text.find(inc), text.find("Host github.com"));
  EXPECT_NE(text.find("Host github.com\n  User git\n"), std::string::npos);
  auto second = Run({"ssh-config", "b", "--install"});
  ASSERT_EQ(second.code, 0) << second.err;
  EXPECT_NE(second.out.find("already includes it"), std::string::npos);
  EXPECT_EQ(Slurp(user_config), text);  // unchanged: one Include
  std::string installed = Slurp(store_ + "/ssh_config");
  EXPECT_NE(installed.find("Host a.cloister\n"), std::string::npos) << installed;
  EXPECT_NE(installed.find("Host b.cloister\n"), std::string::npos) << installed;
  // A removed workspace's block goes at the next install.
  ASSERT_EQ(Run({"rm", "a", "--yes"}).code, 0);
  ASSERT_EQ(Run({"ssh-config", "b", "--install"}).code, 0);
  installed = Slurp(store_ + "/ssh_config");
  EXPECT_EQ(installed.find("Host a.cloister\n"), std::string::npos) << installed;
  EXPECT_NE(installed.find("Host b.cloister\n"), std::string::npos);
}

}  // namespace
}  // namespace cloister::cli
