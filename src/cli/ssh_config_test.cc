#include "cli/ssh_config.h"

#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "base/strings.h"

namespace cloister::cli {
namespace {

namespace fs = std::filesystem;

SshHostSpec Spec() {
  SshHostSpec s;
  s.name = "ws";
  s.cloister = "/opt/my tools/cloister";
  s.store_root = "/home/u/100%/store";
  s.identity = "/home/u/100%/store/keys/ssh-client";
  s.known_hosts = "/home/u/100%/store/workspaces/ws/ssh/known_hosts";
  return s;
}

std::string Read(const std::string& p) {
  std::ifstream f(p);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

TEST(SshConfigTest, BlockHasEveryOptionQuotedForSshAndTheShell) {
  auto block = SshHostBlock(Spec());
  ASSERT_TRUE(block.ok()) << block.error().ToString();
  const std::string want =
      "Host ws.cloister\n"
      "  User dev\n"
      "  ProxyCommand '/opt/my tools/cloister' --store '/home/u/100%%/store' _ssh-stdio 'ws'\n"
      "  IdentityFile \"/home/u/100%%/store/keys/ssh-client\"\n"
      "  IdentitiesOnly yes\n"
      "  UserKnownHostsFile \"/home/u/100%%/store/workspaces/ws/ssh/known_hosts\"\n"
      "  GlobalKnownHostsFile none\n"
      "  HostKeyAlias ws.cloister\n"
      "  StrictHostKeyChecking yes\n"
      "  UpdateHostKeys no\n"
      "  ForwardAgent no\n"
      "  ForwardX11 no\n";
  ASSERT_NE(block->find(want), std::string::npos) << *block;
  EXPECT_TRUE(StartsWith(*block, "# cloister workspace ws "));
  EXPECT_EQ(SshConfigHosts(*block), std::vector<std::string>{"ws"});
}

TEST(SshConfigTest, DefaultStoreIsNotNamedAndQuotesInPathsAreRefused) {
  SshHostSpec s = Spec();
  s.store_root.clear();
  s.cloister = "/usr/bin/it's/cloister";
  auto opts = SshHostOptions(s);
  ASSERT_TRUE(opts.ok());
  EXPECT_EQ((*opts)[1].second, "'/usr/bin/it'\\''s/cloister' _ssh-stdio 'ws'");
  s.identity = "/a\"b";
  EXPECT_FALSE(SshHostOptions(s).ok());
  s = Spec();
  s.known_hosts = "/a\nHost *\n  ProxyCommand evil";
  EXPECT_FALSE(SshHostOptions(s).ok());
  s = Spec();
  s.store_root = "/${HOME}";
  EXPECT_FALSE(SshHostOptions(s).ok());
}

TEST(SshConfigTest, IncludeGoesFirstAndOnlyOnce) {
  std::string inc = SshIncludeLine("/s/ssh_config");
  EXPECT_EQ(inc, "Include \"/s/ssh_config\"");
  auto [text, changed] = WithSshInclude("Host a\n  User b\n", inc);
  EXPECT_TRUE(changed);
  // Before any Host line: an Include inside a Host block would apply to that host only.
  EXPECT_LT(text.find(inc), text.find("Host a"));
  EXPECT_NE(text.find("Host a\n  User b\n"), std::string::npos);
  auto [again, changed2] = WithSshInclude(text, inc);
  EXPECT_FALSE(changed2);
  EXPECT_EQ(again, text);
}

TEST(SshConfigTest, InstallIsAtomicIdempotentKeepsModeAndFollowsSymlinks) {
  char tmpl[] = "/tmp/cloister-sshcfg-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  std::string dir = tmpl;
  // Absent: ~/.ssh made 0700, config 0600.
  std::string cfg = dir + "/home/.ssh/config";
  fs::create_directories(dir + "/home");
  auto r = InstallSshInclude(cfg, "/s/ssh_config");
  ASSERT_TRUE(r.ok()) << r.error().ToString();
  EXPECT_TRUE(*r);
  struct stat st{};
  ASSERT_EQ(stat((dir + "/home/.ssh").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  ASSERT_EQ(stat(cfg.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  r = InstallSshInclude(cfg, "/s/ssh_config");
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(*r);
  // An existing 0644 file keeps its mode and its text.
  std::string other = dir + "/other";
  std::ofstream(other) << "Host x\n  Port 2222\n";
  chmod(other.c_str(), 0644);
  ASSERT_TRUE(InstallSshInclude(other, "/s/ssh_config").ok());
  ASSERT_EQ(stat(other.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0644u);
  EXPECT_NE(Read(other).find("Include \"/s/ssh_config\"\n\nHost x\n  Port 2222\n"), std::string::npos);
  // A symlinked config (dotfile managers): the target changes, the link stays a link.
  std::string link = dir + "/link";
  fs::create_symlink(other, link);
  ASSERT_TRUE(InstallSshInclude(link, "/t/ssh_config").ok());
  EXPECT_TRUE(fs::is_symlink(link));
  EXPECT_NE(Read(other).find("Include \"/t/ssh_config\""), std::string::npos);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace cloister::cli
