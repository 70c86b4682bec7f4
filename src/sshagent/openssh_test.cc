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
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>

#include "base/strings.h"
#include "base/subprocess.h"
#include "base/testing_net.h"
#include "proxy/ca.h"
#include "proxy/proxy.h"
#include "proxy/trace.h"
#include "sshagent/agent.h"
#include "sshagent/guest_ssh.h"
#include "sshagent/host_key.h"
#include "sshagent/host_pins.h"
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

// The built guest agent: $CLOISTER_AGENT_BIN, else the build tree's src/guest/cloister-agent.
std::string GuestAgentBinary() {
  if (const char* e = std::getenv("CLOISTER_AGENT_BIN"); e && *e) return e;
  const char* b = std::getenv("CLOISTER_BINARY_DIR");
  std::string p = std::string(b ? b : ".") + "/src/guest/cloister-agent";
  return access(p.c_str(), X_OK) == 0 ? p : "";
}

// Reserves a free loopback port (bind 0, read it, release).
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
    // The binder: the workspace policy policy_ (set by each test), pinning on first use with the
    // real ssh-keyscan, which asks the host the policy names (resolve_ maps test names to sshd).
    agent_ = std::make_unique<SignOnlyAgent>(
        std::move(key).value(), "cloister:test-ws", nullptr,
        [this](std::string_view blob) -> Result<std::string> {
          std::lock_guard<std::mutex> lock(mu_);
          if (!pinner_) {
            pinner_ = std::make_unique<HostKeyPinner>(HostPinnerDeps{
                [this]() -> Result<SshPolicy> { return policy_; },
                [this](const std::string& host, const std::vector<std::string>& lines) -> Status {
                  policy_.host_keys[host] = lines;
                  return ValidateSshPolicy(policy_);
                },
                KeyscanScanner(resolve_)});
          }
          return pinner_->Bind(blob);
        });
    sock_ = (dir_ / "agent.sock").string();
    auto server = UnixAgentServer::Start(sock_, agent_.get());
    ASSERT_TRUE(server.ok()) << server.error().ToString();
    server_ = std::move(server).value();
    pub_line_ = agent_->key().AuthorizedKeysLine("cloister:test-ws");
    WriteFile(dir_ / "ws.pub", pub_line_ + "\n");
  }

  void TearDown() override {
    sshd_.reset();
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

  static bool SshdRunnable() { return testnet::TestSshd::Runnable(); }
  static std::string User() { return getpwuid(geteuid())->pw_name; }

  // Starts sshd on 127.0.0.1 (own host key hostkey/hostkey.pub, only the workspace key
  // authorised); returns its port, or -1. Callers skip first unless SshdRunnable().
  // Also offers ECDSA (hostkey_ecdsa) and RSA (hostkey_rsa) host keys when `all_types`.
  int StartSshd(bool all_types = false) {
    testnet::SshdOptions o;
    o.dir = dir_.string();
    o.authorized_keys = pub_line_;
    o.all_host_key_types = all_types;
    auto sshd = testnet::TestSshd::Start(o);
    EXPECT_TRUE(sshd.ok()) << sshd.error().ToString() << ReadFile(dir_ / "sshd.log");
    if (!sshd.ok()) return -1;
    sshd_ = std::make_unique<testnet::TestSshd>(std::move(sshd).value());
    return sshd_->port();
  }

  // ssh to the test sshd on 127.0.0.1:port, with only the agent's key; known_hosts has sshd's keys.
  RunOutput Login(int port, std::vector<std::string> extra = {}) {
    std::string kh;
    for (const char* f : {"hostkey.pub", "hostkey_ecdsa.pub", "hostkey_rsa.pub"}) {
      if (fs::exists(dir_ / f)) kh += "[127.0.0.1]:" + std::to_string(port) + " " + ReadFile(dir_ / f);
    }
    WriteFile(dir_ / "known_hosts", kh);
    std::vector<std::string> argv = {
        "ssh", "-F", "/dev/null", "-p", std::to_string(port), "-o", "BatchMode=yes", "-o",
        "UserKnownHostsFile=" + (dir_ / "known_hosts").string(), "-o", "GlobalKnownHostsFile=/dev/null",
        "-o", "StrictHostKeyChecking=yes", "-o", "PasswordAuthentication=no", "-o",
        "IdentityFile=/dev/null", "-o", "IdentityAgent=" + sock_};
    argv.insert(argv.end(), extra.begin(), extra.end());
    for (const std::string& a : {User() + "@127.0.0.1", std::string("echo"), std::string("cloister-login-ok")}) {
      argv.push_back(a);
    }
    return Run(argv);
  }

  // A policy for sshd on 127.0.0.1:port (no pins yet).
  void PolicyFor(const std::string& host, int port) {
    policy_.tunnel_hosts = {host};
    policy_.tunnel_ports = {static_cast<uint16_t>(port)};
    policy_.host_keys.clear();
  }

  std::mutex mu_;
  SshPolicy policy_;
  std::map<std::string, std::string> resolve_;
  std::unique_ptr<HostKeyPinner> pinner_;
  fs::path dir_;
  std::string sock_;
  std::string pub_line_;
  std::unique_ptr<SignOnlyAgent> agent_;
  std::unique_ptr<UnixAgentServer> server_;
  std::unique_ptr<testnet::TestSshd> sshd_;
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

// Logs in to the test sshd on 127.0.0.1:port as the current user, through the agent only.
TEST_F(OpenSshAgentTest, SshLogsInToLoopbackSshdWithOnlyTheAgentKey) {
  if (!SshdRunnable()) GTEST_SKIP() << "needs openssh-server and root (sshd privilege separation)";
  int port = StartSshd();
  ASSERT_GT(port, 0);
  PolicyFor("127.0.0.1", port);
  RunOutput s = Login(port);
  EXPECT_EQ(s.exit_code, 0) << s.err << "\n" << ReadFile(dir_ / "sshd.log");
  EXPECT_EQ(Trim(s.out), "cloister-login-ok");
  EXPECT_GE(agent_->signatures(), 1u);
  std::string log = ReadFile(dir_ / "sshd.log");
  EXPECT_NE(log.find("Accepted publickey for " + User()), std::string::npos) << log;
  EXPECT_NE(log.find(agent_->key().Fingerprint()), std::string::npos) << log;
  // The session was bound to sshd's host key, pinned on first use for the policy host.
  std::string hostpub = Trim(ReadFile(dir_ / "hostkey.pub"));
  ASSERT_EQ(policy_.host_keys.count("127.0.0.1"), 1u);
  EXPECT_EQ(policy_.host_keys["127.0.0.1"],
            std::vector<std::string>{hostpub.substr(0, hostpub.rfind(' '))});
}

// Issue 15 item 10 with real OpenSSH: a session bound to a host key other than the pinned one
// gets no login signature.
TEST_F(OpenSshAgentTest, ASessionBoundToAnUnpinnedHostKeyGetsNoSignature) {
  if (!SshdRunnable()) GTEST_SKIP() << "needs openssh-server and root (sshd privilege separation)";
  int port = StartSshd();
  ASSERT_GT(port, 0);
  PolicyFor("127.0.0.1", port);
  // The workspace pinned another key for the host (the host's key changed, or this is not it).
  auto stale = Ed25519Key::Generate();
  ASSERT_TRUE(stale.ok());
  policy_.host_keys["127.0.0.1"] = {*HostKeyLine(stale->PublicKeyBlob())};
  RunOutput s = Login(port);
  EXPECT_NE(s.exit_code, 0) << s.out;
  EXPECT_EQ(agent_->signatures(), 0u);
  EXPECT_GE(agent_->refusals(), 1u);
  EXPECT_EQ(ReadFile(dir_ / "sshd.log").find("Accepted publickey"), std::string::npos);
  // A policy without that host at all: refused too (nothing is pinned for a non-policy host).
  PolicyFor("git.example.test", port);
  EXPECT_NE(Login(port).exit_code, 0);
  EXPECT_EQ(agent_->signatures(), 0u);
  EXPECT_TRUE(policy_.host_keys.empty());
  // Unpinned (`cloister ssh-policy NAME --unpin`), the same login pins and succeeds.
  PolicyFor("127.0.0.1", port);
  RunOutput again = Login(port);
  EXPECT_EQ(again.exit_code, 0) << again.err;
  EXPECT_GE(agent_->signatures(), 1u);
}

// The binding's host key signature is checked for each host key type sshd offers.
TEST_F(OpenSshAgentTest, BindingVerifiesEcdsaAndRsaHostKeys) {
  if (!SshdRunnable()) GTEST_SKIP() << "needs openssh-server and root (sshd privilege separation)";
  int port = StartSshd(/*all_types=*/true);
  ASSERT_GT(port, 0);
  PolicyFor("127.0.0.1", port);
  for (const char* alg : {"ecdsa-sha2-nistp256", "rsa-sha2-512", "rsa-sha2-256", "ssh-ed25519"}) {
    size_t before = agent_->signatures();
    RunOutput s = Login(port, {"-o", std::string("HostKeyAlgorithms=") + alg});
    EXPECT_EQ(s.exit_code, 0) << alg << ": " << s.err;
    EXPECT_EQ(agent_->signatures(), before + 1) << alg;
  }
  // One scan pinned all three of the host's keys.
  EXPECT_EQ(policy_.host_keys["127.0.0.1"].size(), 3u);
}

// The guest's way out for ssh: the ssh_config drop-in and connect script the guest gets
// (guest_ssh.h), an opaque CONNECT tunnel of the real egress proxy, the workspace agent.
TEST_F(OpenSshAgentTest, SshThroughTheProxyTunnelReachesOnlyAllowedHosts) {
  if (!SshdRunnable()) GTEST_SKIP() << "needs openssh-server and root (sshd privilege separation)";
  int port = StartSshd();
  ASSERT_GT(port, 0);
  auto ca = proxy::CertAuthority::CreateInMemory("test proxy CA");
  ASSERT_TRUE(ca.ok());
  proxy::ProxyConfig cfg;
  cfg.workspace = "test-ws";
  cfg.ca = *ca;
  std::string sshd_addr = "127.0.0.1:" + std::to_string(port);
  cfg.resolve = {{"git.example.test:22", sshd_addr}, {"other.example.org:22", sshd_addr},
                 {"git.example.test:2222", sshd_addr}};
  cfg.resolve_only = true;
  cfg.tunnel_ports = {22};
  cfg.tunnel_hosts = {"git.example.test"};
  PolicyFor("git.example.test", 22);
  resolve_ = cfg.resolve;
  cfg.trace = *proxy::TraceSink::Open((dir_ / "trace.jsonl").string());
  auto px = proxy::Proxy::Start(std::move(cfg));
  ASSERT_TRUE(px.ok()) << px.error().ToString();
  auto proxy_port = (*px)->ListenLoopback();
  ASSERT_TRUE(proxy_port.ok());

  // The guest's CONNECT client: the static agent's `ssh-connect` (guest/ssh_connect.h).
  std::string agent_bin = GuestAgentBinary();
  if (agent_bin.empty()) GTEST_SKIP() << "cloister-agent not built (CLOISTER_BUILD_GUEST off)";
  WriteFile(dir_ / "ssh_config",
            GuestSshConfig(agent_bin + " ssh-connect --proxy-port " + std::to_string(*proxy_port), sock_));
  std::string hostpub = ReadFile(dir_ / "hostkey.pub");
  WriteFile(dir_ / "known_hosts", "git.example.test " + hostpub + "other.example.org " + hostpub +
                                      "[git.example.test]:2222 " + hostpub);
  auto ssh = [&](const std::string& host, std::vector<std::string> extra = {}) {
    std::vector<std::string> argv = {"ssh", "-F", (dir_ / "ssh_config").string(), "-o", "BatchMode=yes",
                                     "-o", "UserKnownHostsFile=" + (dir_ / "known_hosts").string(),
                                     "-o", "GlobalKnownHostsFile=/dev/null", "-o",
                                     "StrictHostKeyChecking=yes", "-o", "IdentityFile=/dev/null"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    argv.push_back(User() + "@" + host);
    argv.push_back("echo");
    argv.push_back("cloister-tunnel-ok");
    return Run(argv);
  };
  RunOutput ok = ssh("git.example.test");
  EXPECT_EQ(ok.exit_code, 0) << ok.err << "\n" << ReadFile(dir_ / "sshd.log");
  EXPECT_EQ(Trim(ok.out), "cloister-tunnel-ok");
  EXPECT_GE(agent_->signatures(), 1u);
  EXPECT_NE(ReadFile(dir_ / "sshd.log").find(agent_->key().Fingerprint()), std::string::npos);

  // A host outside the tunnel scope: the proxy answers 403 before connecting anywhere.
  size_t sigs = agent_->signatures();
  RunOutput other = ssh("other.example.org");
  EXPECT_NE(other.exit_code, 0);
  EXPECT_NE(other.err.find("proxy refused other.example.org:22"), std::string::npos) << other.err;
  EXPECT_NE(other.err.find("403"), std::string::npos) << other.err;
  EXPECT_NE(other.err.find("cloister ssh-policy NAME --add-host HOST"), std::string::npos) << other.err;
  // An allowed host on a port that is not a tunnel port: the tunnel must carry TLS, SSH is cut.
  RunOutput port2222 = ssh("git.example.test", {"-p", "2222"});
  EXPECT_NE(port2222.exit_code, 0);
  EXPECT_EQ(agent_->signatures(), sigs);
  (*px)->Stop();
  auto trace = proxy::ReadTrace((dir_ / "trace.jsonl").string());
  ASSERT_TRUE(trace.ok());
  int tunnels = 0;
  for (const auto& r : *trace) {
    if (r.method == "CONNECT" && r.host == "git.example.test" && r.status == 200 && r.port == 22) {
      ++tunnels;
      EXPECT_GT(r.bytes_up, 0u);
      EXPECT_GT(r.bytes_down, 0u);
    }
  }
  EXPECT_EQ(tunnels, 1);
}

}  // namespace
}  // namespace cloister::sshagent
