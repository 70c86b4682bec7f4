// OpenSSH's own clients against the sign-only agent (label: integration).
// ssh-add, ssh-keygen -Y and ssh talk to the agent on a unix socket set as SSH_AUTH_SOCK; ssh logs
// in to an sshd this test starts on 127.0.0.1 with only the agent's key authorised.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <pwd.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "base/strings.h"
#include "base/subprocess.h"
#include "sshagent/agent.h"
#include "sshagent/unix_server.h"

namespace cloister::sshagent {
namespace {

namespace fs = std::filesystem;

std::string ReadFile(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

void WriteFile(const fs::path& p, const std::string& s, fs::perms perms = fs::perms::owner_read | fs::perms::owner_write) {
  std::ofstream(p, std::ios::binary) << s;
  fs::permissions(p, perms);
}

class OpenSshAgentTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* p : {"ssh-add", "ssh-keygen", "ssh"}) {
      if (!ProgramExists(p)) GTEST_SKIP() << p << " not installed (scripts/install-deps.sh test)";
    }
    char tmpl[] = "/tmp/cloister-sshagent-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    auto key = Ed25519Key::Generate();
    ASSERT_TRUE(key.ok());
    agent_ = std::make_unique<SignOnlyAgent>(std::move(key).value(), "cloister:test-ws");
    sock_ = (dir_ / "agent.sock").string();
    auto server = UnixAgentServer::Start(sock_, agent_.get());
    ASSERT_TRUE(server.ok()) << server.error().ToString();
    server_ = std::move(server).value();
    pub_line_ = agent_->key().AuthorizedKeysLine("cloister:test-ws");
    WriteFile(dir_ / "ws.pub", pub_line_ + "\n");
  }

  void TearDown() override {
    if (sshd_pid_ > 0) kill(sshd_pid_, SIGTERM);
    if (server_) server_->Stop();
    std::error_code ec;
    if (!dir_.empty()) fs::remove_all(dir_, ec);
  }

  RunOutput Run(std::vector<std::string> argv, std::string stdin_data = "") {
    RunOptions opts;
    opts.env_set["SSH_AUTH_SOCK"] = sock_;
    opts.env_set["SSH_ASKPASS"] = (dir_ / "askpass").string();
    opts.env_set["SSH_ASKPASS_REQUIRE"] = "force";
    opts.env_set["DISPLAY"] = ":0";
    opts.stdin_data = std::move(stdin_data);
    opts.timeout = std::chrono::seconds(60);
    auto out = RunProcess(argv, opts);
    EXPECT_TRUE(out.ok()) << out.error().ToString();
    return out.ok() ? *out : RunOutput{};
  }

  std::vector<std::string> ListedKeys() {
    RunOutput out = Run({"ssh-add", "-L"});
    EXPECT_EQ(out.exit_code, 0) << out.err;
    std::vector<std::string> lines;
    for (auto& l : Split(out.out, '\n')) {
      if (!Trim(l).empty()) lines.push_back(Trim(l));
    }
    return lines;
  }

  fs::path dir_;
  std::string sock_;
  std::string pub_line_;
  std::unique_ptr<SignOnlyAgent> agent_;
  std::unique_ptr<UnixAgentServer> server_;
  pid_t sshd_pid_ = -1;
};

TEST_F(OpenSshAgentTest, SshAddListsExactlyTheWorkspaceKey) {
  EXPECT_EQ(ListedKeys(), std::vector<std::string>{pub_line_});
  RunOutput l = Run({"ssh-add", "-l"});
  EXPECT_EQ(l.exit_code, 0);
  EXPECT_NE(l.out.find(agent_->key().Fingerprint()), std::string::npos) << l.out;
  EXPECT_NE(l.out.find("(ED25519)"), std::string::npos) << l.out;
}

TEST_F(OpenSshAgentTest, SshKeygenSignAndVerifyRoundTrip) {
  WriteFile(dir_ / "msg", "commit 1234\n");
  RunOutput s = Run({"ssh-keygen", "-Y", "sign", "-f", (dir_ / "ws.pub").string(), "-n", "git",
                     (dir_ / "msg").string()});
  ASSERT_EQ(s.exit_code, 0) << s.err;
  ASSERT_TRUE(fs::exists(dir_ / "msg.sig"));
  EXPECT_EQ(agent_->signatures(), 1u);
  WriteFile(dir_ / "allowed", "dev@cloister " + pub_line_ + "\n");
  auto verify = [&](const std::string& content) {
    return Run({"ssh-keygen", "-Y", "verify", "-f", (dir_ / "allowed").string(), "-I",
                "dev@cloister", "-n", "git", "-s", (dir_ / "msg.sig").string()},
               content);
  };
  RunOutput v = verify("commit 1234\n");
  EXPECT_EQ(v.exit_code, 0) << v.out << v.err;
  EXPECT_NE(v.out.find("Good \"git\" signature for dev@cloister"), std::string::npos) << v.out;
  // The verifier is real: a changed message fails.
  EXPECT_NE(verify("commit 1235\n").exit_code, 0);
}

TEST_F(OpenSshAgentTest, AddRemoveLockAreAllRefused) {
  RunOutput kg = Run({"ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", (dir_ / "newkey").string()});
  ASSERT_EQ(kg.exit_code, 0) << kg.err;
  RunOutput add = Run({"ssh-add", (dir_ / "newkey").string()});
  EXPECT_NE(add.exit_code, 0) << add.out << add.err;
  RunOutput add_t = Run({"ssh-add", "-t", "60", (dir_ / "newkey").string()});
  EXPECT_NE(add_t.exit_code, 0);
  RunOutput del = Run({"ssh-add", "-d", (dir_ / "ws.pub").string()});
  EXPECT_NE(del.exit_code, 0) << del.out << del.err;
  RunOutput del_all = Run({"ssh-add", "-D"});
  EXPECT_NE(del_all.exit_code, 0) << del_all.out << del_all.err;
  WriteFile(dir_ / "askpass", "#!/bin/sh\necho lock-password\n",
            fs::perms::owner_all);
  RunOutput lock = Run({"ssh-add", "-x"});
  EXPECT_NE(lock.exit_code, 0) << lock.out << lock.err;
  EXPECT_NE(lock.err.find("Failed to lock agent"), std::string::npos) << lock.err;
  RunOutput unlock = Run({"ssh-add", "-X"});
  EXPECT_NE(unlock.exit_code, 0);
  // After all of that the agent still holds exactly its own key, and still signs.
  EXPECT_EQ(ListedKeys(), std::vector<std::string>{pub_line_});
  EXPECT_GE(agent_->refusals(), 5u);
  EXPECT_EQ(server_->protocol_errors(), 0);
}

// Reserves a free loopback port (bind 0, read it, release).
int FreeLoopbackPort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    close(fd);
    return -1;
  }
  socklen_t len = sizeof a;
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  return ntohs(a.sin_port);
}

TEST_F(OpenSshAgentTest, SshLogsInToLoopbackSshdWithOnlyTheAgentKey) {
  if (!ProgramExists("/usr/sbin/sshd")) GTEST_SKIP() << "openssh-server not installed";
  if (geteuid() != 0) GTEST_SKIP() << "sshd test runs as root (privilege separation)";
  fs::create_directories("/run/sshd");  // sshd's privilege separation directory (Debian)
  const char* user = getpwuid(geteuid())->pw_name;
  RunOutput hk = Run({"ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", (dir_ / "hostkey").string()});
  ASSERT_EQ(hk.exit_code, 0) << hk.err;
  WriteFile(dir_ / "authorized_keys", pub_line_ + "\n");
  int port = -1;
  for (int attempt = 0; attempt < 3 && sshd_pid_ < 0; ++attempt) {
    port = FreeLoopbackPort();
    ASSERT_GT(port, 0);
    std::ostringstream cfg;
    cfg << "ListenAddress 127.0.0.1:" << port << "\n"
        << "HostKey " << (dir_ / "hostkey").string() << "\n"
        << "PidFile " << (dir_ / "sshd.pid").string() << "\n"
        << "AuthorizedKeysFile " << (dir_ / "authorized_keys").string() << "\n"
        << "StrictModes no\nUsePAM no\nPermitRootLogin prohibit-password\n"
        << "PasswordAuthentication no\nKbdInteractiveAuthentication no\n"
        << "PubkeyAuthentication yes\nLogLevel VERBOSE\n";
    WriteFile(dir_ / "sshd_config", cfg.str());
    // sshd binds before it daemonises, so when this returns it is listening (or failed).
    RunOutput d = Run({"/usr/sbin/sshd", "-f", (dir_ / "sshd_config").string(), "-E",
                       (dir_ / "sshd.log").string()});
    if (d.exit_code != 0) continue;
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (std::chrono::steady_clock::now() < deadline) {
      std::string pid = Trim(ReadFile(dir_ / "sshd.pid"));
      if (!pid.empty()) {
        sshd_pid_ = std::stoi(pid);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));  // polling a file, bounded
    }
  }
  ASSERT_GT(sshd_pid_, 0) << ReadFile(dir_ / "sshd.log");
  RunOutput hostpub = Run({"cat", (dir_ / "hostkey.pub").string()});
  WriteFile(dir_ / "known_hosts", "[127.0.0.1]:" + std::to_string(port) + " " + hostpub.out);
  RunOutput s = Run({"ssh", "-F", "/dev/null", "-p", std::to_string(port), "-o", "BatchMode=yes",
                     "-o", "UserKnownHostsFile=" + (dir_ / "known_hosts").string(), "-o",
                     "GlobalKnownHostsFile=/dev/null", "-o", "StrictHostKeyChecking=yes", "-o",
                     "PasswordAuthentication=no", "-o", "IdentityFile=/dev/null", "-o",
                     "IdentityAgent=" + sock_, std::string(user) + "@127.0.0.1",
                     "echo", "cloister-login-ok"});
  EXPECT_EQ(s.exit_code, 0) << s.err << "\n" << ReadFile(dir_ / "sshd.log");
  EXPECT_EQ(Trim(s.out), "cloister-login-ok");
  EXPECT_GE(agent_->signatures(), 1u);
  std::string log = ReadFile(dir_ / "sshd.log");
  EXPECT_NE(log.find("Accepted publickey for " + std::string(user)), std::string::npos) << log;
  EXPECT_NE(log.find(agent_->key().Fingerprint()), std::string::npos) << log;
}

}  // namespace
}  // namespace cloister::sshagent
