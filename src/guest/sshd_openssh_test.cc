// The guest's sshd service (guest/sshd.h) against the host's real OpenSSH: each connection to a
// unix socket (as the channel bridges a stream to a socketpair) is served by ServeSshd, i.e.
// `sshd -i` with the config the agent writes, the host key and authorized_keys from the store's
// key files (sshagent/ide_keys.h, the same bytes the metadata disk carries). The client is `ssh
// -F` with the options `cloister ssh-config` writes, its ProxyCommand socat. Root only (sshd's
// privilege separation); the sessions log in as root (SshdOptions::permit_root, tests only).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>

#include "base/file_util.h"
#include "base/strings.h"
#include "base/subprocess.h"
#include "base/testing_net.h"
#include "base/testing_file.h"
#include "guest/sshd.h"
#include "sshagent/ide_keys.h"

namespace cloister::guest {
namespace {

namespace fs = std::filesystem;

using testfile::Slurp;

class SshdOpenSshTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0 || !ProgramExists("/usr/sbin/sshd") || !ProgramExists("ssh") ||
        !ProgramExists("socat")) {
      GTEST_SKIP() << "needs root, openssh-server, openssh-client and socat";
    }
    // Not under /tmp: sshd's StrictModes refuses an authorized_keys below a world-writable dir.
    char tmpl[] = "/run/cloister-sshd-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    keys_ = dir_ + "/keys";
    ws_ = dir_ + "/ws";
    fs::create_directories(ws_);
    ASSERT_TRUE(sshagent::MakeSshdHostKey(ws_).ok());
    auto material = sshagent::SshdGuestMaterialFor(keys_, ws_);
    ASSERT_TRUE(material.ok()) << material.error().ToString();
    o_.dir = dir_ + "/guest";
    fs::create_directories(o_.dir);
    o_.host_key = o_.dir + "/ssh_host_ed25519_key";
    o_.authorized_keys = o_.dir + "/authorized_keys";
    ASSERT_TRUE(WriteFile(o_.host_key, material->host_key.view(), 0600).ok());
    ASSERT_TRUE(WriteFile(o_.authorized_keys, material->authorized_keys, 0644).ok());
    o_.user = "root";
    o_.permit_root = true;
    o_.env = {{"HTTPS_PROXY", "http://127.0.0.1:3128"}};
    o_.agent_socket = dir_ + "/workspace-agent.sock";
    o_.log = [this](std::string_view l) {
      std::lock_guard<std::mutex> lock(mu_);
      logs_ += std::string(l) + "\n";
    };
    ASSERT_TRUE(sshagent::PinSshdHostKey("ws", ws_).ok());

    // The "channel": a unix listener; each connection is one ServeSshd.
    sock_ = dir_ + "/channel.sock";
    listen_fd_ = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::strncpy(a.sun_path, sock_.c_str(), sizeof a.sun_path - 1);
    ASSERT_EQ(bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    ASSERT_EQ(listen(listen_fd_, 16), 0);
    acceptor_ = std::thread([this] {
      while (true) {
        int c = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
        if (c < 0) {
          if (errno == EINTR) continue;
          return;
        }
        std::lock_guard<std::mutex> l(mu_);
        sessions_.emplace_back([c, this] { ServeSshd(c, o_); });
      }
    });
    WriteClientConfig(sshagent::ClientKeyPath(keys_));
  }

  void TearDown() override {
    if (listen_fd_ >= 0) {
      shutdown(listen_fd_, SHUT_RDWR);
      close(listen_fd_);
    }
    if (acceptor_.joinable()) acceptor_.join();
    for (std::thread& t : sessions_) t.join();  // each sshd ends with its client
    for (pid_t p : agents_) testnet::StopDaemon(p);  // each unlinks its socket as it goes
    std::error_code ec;
    if (!dir_.empty()) fs::remove_all(dir_, ec);
  }

  // The block `cloister ssh-config` writes, with socat as the ProxyCommand.
  void WriteClientConfig(const std::string& identity) {
    std::ofstream(dir_ + "/ssh_config")
        << "Host ws.cloister\n"
        << "  User root\n"
        << "  ProxyCommand socat - UNIX-CONNECT:" << sock_ << "\n"
        << "  IdentityFile " << identity << "\n"
        << "  IdentitiesOnly yes\n"
        << "  UserKnownHostsFile " << sshagent::KnownHostsPath(ws_) << "\n"
        << "  StrictHostKeyChecking yes\n"
        << "  ForwardAgent no\n"
        << "  BatchMode yes\n"
        << "  LogLevel ERROR\n";
  }

  RunOutput Ssh(std::vector<std::string> args, const std::string& tool = "ssh",
                const std::map<std::string, std::string>& env = {}) {
    std::vector<std::string> argv = {tool, "-F", dir_ + "/ssh_config"};
    argv.insert(argv.end(), args.begin(), args.end());
    RunOptions ro;
    ro.timeout = std::chrono::seconds(120);
    ro.env_set = env;
    ro.env_unset = {"SSH_AUTH_SOCK"};
    if (!env.empty() && env.count("SSH_AUTH_SOCK")) ro.env_unset.clear();
    auto r = RunProcess(argv, ro);
    EXPECT_TRUE(r.ok());
    return r.ok() ? *r : RunOutput{};
  }

  // ssh-agent on `path` holding a fresh key; returns the key's public line.
  std::string StartAgent(const std::string& path, const std::string& keyfile) {
    auto k = RunProcess({"ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", keyfile, "-f", keyfile});
    EXPECT_TRUE(k.ok() && k->exit_code == 0);
    auto a = RunProcess({"ssh-agent", "-a", path});
    EXPECT_TRUE(a.ok() && a->exit_code == 0);
    size_t at = a->out.find("SSH_AGENT_PID=");
    if (at != std::string::npos) agents_.push_back(std::stoi(a->out.substr(at + 14)));
    RunOptions ro;
    ro.env_set = {{"SSH_AUTH_SOCK", path}};
    auto add = RunProcess({"ssh-add", keyfile}, ro);
    EXPECT_TRUE(add.ok() && add->exit_code == 0) << (add.ok() ? add->err : "");
    std::vector<std::string> f = Split(Trim(Slurp(keyfile + ".pub")), ' ');
    return f.size() >= 2 ? f[0] + " " + f[1] : "";
  }

  std::string dir_, keys_, ws_, sock_;
  SshdOptions o_;
  std::string logs_;
  int listen_fd_ = -1;
  std::thread acceptor_;
  std::mutex mu_;
  std::vector<std::thread> sessions_;
  std::vector<pid_t> agents_;
};

TEST_F(SshdOpenSshTest, LoginRunsACommandWithTheWorkspaceEnvironment) {
  auto r = Ssh({"ws.cloister", "echo ok; id -un; echo \"sock=$SSH_AUTH_SOCK\"; echo \"proxy=$HTTPS_PROXY\""});
  ASSERT_EQ(r.exit_code, 0) << r.err << logs_ << Slurp(o_.dir + "/sshd.log");
  EXPECT_EQ(r.out, "ok\nroot\nsock=" + o_.agent_socket + "\nproxy=http://127.0.0.1:3128\n");
  EXPECT_NE(Slurp(o_.dir + "/sshd.log").find("Accepted publickey for root"), std::string::npos);
}

TEST_F(SshdOpenSshTest, UnknownClientKeyIsRefused) {
  std::string other = dir_ + "/other";
  ASSERT_EQ(RunProcess({"ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", other})->exit_code, 0);
  WriteClientConfig(other);
  auto r = Ssh({"ws.cloister", "echo ok"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_EQ(r.out.find("ok"), std::string::npos);
  EXPECT_NE(r.err.find("Permission denied (publickey)"), std::string::npos) << r.err;
}

TEST_F(SshdOpenSshTest, ChangedHostKeyIsRefusedUntilPinnedAgain) {
  // `wipe`: a new host key in the guest, the old pin on the host.
  ASSERT_TRUE(sshagent::MakeSshdHostKey(ws_).ok());
  auto material = sshagent::SshdGuestMaterialFor(keys_, ws_);
  ASSERT_TRUE(material.ok());
  ASSERT_TRUE(WriteFile(o_.host_key, material->host_key.view(), 0600).ok());
  auto r = Ssh({"ws.cloister", "echo ok"});
  EXPECT_EQ(r.exit_code, 255);
  EXPECT_NE(r.err.find("REMOTE HOST IDENTIFICATION HAS CHANGED"), std::string::npos) << r.err;
  ASSERT_TRUE(sshagent::PinSshdHostKey("ws", ws_).ok());  // what `ssh-config` does
  r = Ssh({"ws.cloister", "echo ok"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "ok\n");
}

TEST_F(SshdOpenSshTest, AgentForwardingGivesTheWorkspaceAgentNotTheHostOne) {
  std::string host_key = StartAgent(dir_ + "/host-agent.sock", dir_ + "/hostuserkey");
  std::string ws_key = StartAgent(o_.agent_socket, dir_ + "/workspacekey");
  ASSERT_FALSE(host_key.empty());
  ASSERT_FALSE(ws_key.empty());
  auto r = Ssh({"-A", "-o", "ForwardAgent=yes", "ws.cloister", "echo \"sock=$SSH_AUTH_SOCK\"; ssh-add -L"},
               "ssh", {{"SSH_AUTH_SOCK", dir_ + "/host-agent.sock"}});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("sock=" + o_.agent_socket + "\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(ws_key), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find(host_key), std::string::npos) << "the host agent was forwarded:\n" << r.out;
}

// A listener on `ip` (loopback only), answering "hello\n" to one connection; returns its port.
int EchoListener(const char* ip, std::thread* server) {
  int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  inet_pton(AF_INET, ip, &a.sin_addr);
  if (bind(l, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || listen(l, 4) != 0) return -1;
  socklen_t len = sizeof a;
  getsockname(l, reinterpret_cast<sockaddr*>(&a), &len);
  *server = std::thread([l] {
    pollfd p{l, POLLIN, 0};
    if (poll(&p, 1, 60000) == 1) {  // bounded: the test ends either way
      int c = accept4(l, nullptr, nullptr, SOCK_CLOEXEC);
      if (c >= 0) {
        ssize_t w = write(c, "hello\n", 6);
        (void)w;
        close(c);
      }
    }
    close(l);
  });
  return ntohs(a.sin_port);
}

TEST_F(SshdOpenSshTest, OnlyLocalForwardsToTheGuestLoopbackAreAllowed) {
  // IDEs reach their server in the guest through a local forward to its loopback: allowed.
  std::thread s1;
  int port = EchoListener("127.0.0.1", &s1);
  ASSERT_GT(port, 0);
  auto r = Ssh({"-o", "LogLevel=INFO", "-W", "127.0.0.1:" + std::to_string(port), "ws.cloister"});
  s1.join();
  EXPECT_EQ(r.out, "hello\n") << r.exit_code << ": " << r.err;
  // Any other destination (here another loopback address, so a broken check stays on this
  // machine) is refused by sshd before it connects.
  std::thread s2;
  int port2 = EchoListener("127.0.0.2", &s2);
  ASSERT_GT(port2, 0);
  r = Ssh({"-o", "LogLevel=INFO", "-W", "127.0.0.2:" + std::to_string(port2), "ws.cloister"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_EQ(r.out, "");
  EXPECT_NE(r.err.find("administratively prohibited"), std::string::npos) << r.exit_code << ": " << r.err;
  // Unblock the second listener (nobody else connects to it).
  int c = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  inet_pton(AF_INET, "127.0.0.2", &a.sin_addr);
  a.sin_port = htons(static_cast<uint16_t>(port2));
  connect(c, reinterpret_cast<sockaddr*>(&a), sizeof a);
  close(c);
  s2.join();
  // Remote forwards (a guest port leading back to the host) are refused.
  r = Ssh({"-o", "ExitOnForwardFailure=yes", "-R", "0:127.0.0.1:" + std::to_string(port),
           "ws.cloister", "echo forwarded"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_EQ(r.out.find("forwarded"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("remote port forwarding failed"), std::string::npos) << r.err;
}

TEST_F(SshdOpenSshTest, ScpSftpAndRsyncWorkBothWays) {
  std::string src = dir_ + "/src.bin", back = dir_ + "/back.bin";
  std::string data;
  for (int i = 0; i < 100000; ++i) data += static_cast<char>('a' + i % 26);
  ASSERT_TRUE(WriteFile(src, data, 0640).ok());
  std::string remote = dir_ + "/remote.bin";
  auto up = Ssh({"-q", src, "ws.cloister:" + remote}, "scp");
  ASSERT_EQ(up.exit_code, 0) << up.err;
  auto down = Ssh({"-q", "ws.cloister:" + remote, back}, "scp");
  ASSERT_EQ(down.exit_code, 0) << down.err;
  EXPECT_EQ(Slurp(back), data);

  std::ofstream(dir_ + "/batch") << "put " << src << " " << dir_ << "/sftp.bin\nls " << dir_
                                 << "/sftp.bin\n";
  auto sftp = Ssh({"-b", dir_ + "/batch", "ws.cloister"}, "sftp");
  ASSERT_EQ(sftp.exit_code, 0) << sftp.err;
  EXPECT_EQ(Slurp(dir_ + "/sftp.bin"), data);

  if (!ProgramExists("rsync")) GTEST_SKIP() << "rsync not installed (scripts/install-deps.sh)";
  fs::create_directories(dir_ + "/tree/sub");
  ASSERT_TRUE(WriteFile(dir_ + "/tree/sub/f", "rsync me", 0600).ok());
  RunOptions ro;
  ro.timeout = std::chrono::seconds(120);
  ro.env_unset = {"SSH_AUTH_SOCK"};
  auto rs = RunProcess({"rsync", "-a", "-e", "ssh -F " + dir_ + "/ssh_config", dir_ + "/tree/",
                        "ws.cloister:" + dir_ + "/tree-copy/"},
                       ro);
  ASSERT_TRUE(rs.ok());
  ASSERT_EQ(rs->exit_code, 0) << rs->err;
  EXPECT_EQ(Slurp(dir_ + "/tree-copy/sub/f"), "rsync me");
  struct stat st{};
  ASSERT_EQ(stat((dir_ + "/tree-copy/sub/f").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
}

}  // namespace
}  // namespace cloister::guest
