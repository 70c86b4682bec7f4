#include "guest/sshd.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "base/strings.h"

namespace cloister::guest {
namespace {

namespace fs = std::filesystem;

bool HasLine(const std::string& text, const std::string& line) {
  for (const std::string& l : Split(text, '\n')) {
    if (l == line) return true;
  }
  return false;
}

TEST(SshdConfigTest, PublicKeyOnlyForTheWorkspaceUserAndOnlyLocalForwardsToTheGuestLoopback) {
  SshdOptions o;
  std::string c = SshdConfigText(o);
  for (const char* line :
       {"HostKey /run/cloister/sshd/ssh_host_ed25519_key",
        "AuthorizedKeysFile /run/cloister/sshd/authorized_keys", "AuthenticationMethods publickey",
        "PasswordAuthentication no", "KbdInteractiveAuthentication no", "PermitRootLogin no",
        "AllowUsers dev", "AllowAgentForwarding no", "AllowTcpForwarding local",
        "PermitOpen 127.0.0.1:* localhost:* [::1]:*", "PermitListen none",
        "AllowStreamLocalForwarding no", "X11Forwarding no", "PermitTunnel no",
        "PermitUserEnvironment no", "Subsystem sftp internal-sftp",
        "SetEnv \"SSH_AUTH_SOCK=/run/cloister/ssh-agent.sock\""}) {
    EXPECT_TRUE(HasLine(c, line)) << line << "\n" << c;
  }
  // Only the host-given file: nothing the guest user writes (~/.ssh/authorized_keys) counts.
  EXPECT_EQ(c.find(".ssh/authorized_keys"), std::string::npos);
}

TEST(SshdConfigTest, SessionEnvironmentCarriesSafeValuesAndSkipsTheRest) {
  SshdOptions o;
  o.env = {{"HTTPS_PROXY", "http://127.0.0.1:3128"},
           {"ANTHROPIC_API_KEY", "sk-ant-api03-placeholder"},
           {"BAD\"NAME", "x"},
           {"QUOTED", "a\"b"},
           {"NEWLINE", "a\nb"},
           {"SSH_AUTH_SOCK", "/home/dev/other.sock"}};
  std::vector<std::string> skipped;
  std::string c = SshdConfigText(o, &skipped);
  std::string set;
  for (const std::string& l : Split(c, '\n')) {
    if (StartsWith(l, "SetEnv ")) set = l;
  }
  EXPECT_EQ(set,
            "SetEnv \"ANTHROPIC_API_KEY=sk-ant-api03-placeholder\" "
            "\"HTTPS_PROXY=http://127.0.0.1:3128\" \"SSH_AUTH_SOCK=/run/cloister/ssh-agent.sock\"");
  EXPECT_EQ(skipped, (std::vector<std::string>{"BAD\"NAME", "NEWLINE", "QUOTED"}));
  // The config has no line an env value could have started.
  EXPECT_EQ(c.find("\nb"), std::string::npos);
}

TEST(SshdConfigTest, PrepareRefusesWithoutTheHostsKeys) {
  char tmpl[] = "/tmp/cloister-sshd-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  std::string dir = tmpl;
  SshdOptions o;
  o.sshd = "/bin/sh";  // any executable: PrepareSshd only checks it exists
  o.dir = dir + "/sshd";
  o.host_key = o.dir + "/key";
  o.authorized_keys = o.dir + "/authorized_keys";
  o.privsep_dir = dir + "/privsep";
  Status st = PrepareSshd(o);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.error().ToString().find("sshd host key"), std::string::npos) << st.error().ToString();
  fs::create_directories(o.dir);
  std::ofstream(o.host_key) << "key";
  st = PrepareSshd(o);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.error().ToString().find("authorized key"), std::string::npos);
  fs::create_symlink(o.host_key, o.authorized_keys);  // not a regular file
  EXPECT_FALSE(PrepareSshd(o).ok());
  fs::remove(o.authorized_keys);
  std::ofstream(o.authorized_keys) << "ssh-ed25519 AAAA";
  if (geteuid() == 0) {
    ASSERT_TRUE(PrepareSshd(o).ok());
    EXPECT_TRUE(fs::exists(o.dir + "/sshd_config"));
    EXPECT_TRUE(fs::is_directory(o.privsep_dir));
  }
  o.sshd = dir + "/no-sshd";
  st = PrepareSshd(o);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.error().ToString().find("openssh-server"), std::string::npos);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace cloister::guest
