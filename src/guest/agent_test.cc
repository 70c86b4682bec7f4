// The agent on the host, without a VM: its channel is a unix socket this test serves with a host
// Mux, its users come from a temp passwd file, and system setup is limited to temp paths.
#include "guest/agent.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "base/subprocess.h"
#include "channel/exec_client.h"
#include "channel/mux.h"
#include "guest/config.h"
#include "guest/exec_server.h"

namespace cloister::guest {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

fs::path TempDir(const std::string& tag) {
  fs::path d = fs::temp_directory_path() / ("cloister-agent-" + tag + "-" + std::to_string(getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

std::string Slurp(const fs::path& p) {
  std::ifstream f(p);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

TEST(AgentConfigTest, ParsesTheVmModulesSchemaAndDefaults) {
  auto c = ParseAgentConfig(R"({"version":1,"workspace":"ws","hostname":"ws-host","boot_id":"ab",
    "user":"dev","uid":1000,"gid":1000,"home":"/home/dev","home_device":"/dev/vdb",
    "channel_port":"org.cloister.channel.0",
    "shares":[{"tag":"share0","path":"/home/dev/src","readonly":true}],
    "env":{"HTTPS_PROXY":"http://127.0.0.1:3128","A_B":"x y"}})");
  ASSERT_TRUE(c.ok()) << c.error().message();
  EXPECT_EQ(c->workspace, "ws");
  EXPECT_EQ(c->hostname, "ws-host");
  ASSERT_EQ(c->shares.size(), 1u);
  EXPECT_TRUE(c->shares[0].readonly);
  EXPECT_EQ(c->env.at("A_B"), "x y");
  ASSERT_EQ(c->forwards.size(), 2u);  // defaults: proxy and ssh-agent
  EXPECT_EQ(c->forwards[0].listen, "tcp:127.0.0.1:3128");
  EXPECT_EQ(c->forwards[0].service, "proxy");
  EXPECT_EQ(c->forwards[1].service, "ssh-agent");
}

TEST(AgentConfigTest, RejectsMalformedDocuments) {
  EXPECT_FALSE(ParseAgentConfig("{").ok());
  EXPECT_FALSE(ParseAgentConfig("[]").ok());
  EXPECT_FALSE(ParseAgentConfig(R"({"version":2})").ok());
  EXPECT_FALSE(ParseAgentConfig(R"({"env":{"BAD NAME":"x"}})").ok());
  EXPECT_FALSE(ParseAgentConfig(R"({"env":{"A":1}})").ok());
  EXPECT_FALSE(ParseAgentConfig(R"({"shares":[{"tag":"t","path":"relative"}]})").ok());
  EXPECT_FALSE(ParseAgentConfig(R"({"files":[{"path":"/x"}]})").ok());
}

TEST(AgentConfigTest, ProfileScriptQuotesValuesSafely) {
  std::string s = ProfileScript({{"A", "it's $HOME `x`"}, {"B", ""}});
  EXPECT_NE(s.find("export A='it'\\''s $HOME `x`'\n"), std::string::npos);
  EXPECT_NE(s.find("export B=''\n"), std::string::npos);
  // A shell reading it gets the exact values back.
  auto dir = TempDir("profile");
  std::ofstream(dir / "p.sh") << s;
  auto out = RunProcess({"sh", "-c", ". \"$0\"; printf '%s|%s' \"$A\" \"$B\"", (dir / "p.sh").string()});
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(out->out, "it's $HOME `x`|");
  fs::remove_all(dir);
}

TEST(AgentSetupTest, WritesProfileAndFilesWithModes) {
  auto dir = TempDir("setup");
  AgentConfig c;
  c.home_device = "";  // no mounts on the host
  c.env = {{"CLOISTER_WORKSPACE", "ws"}};
  c.files = {{(dir / "etc/cloister/ca.pem").string(), "PEM\n", 0644, "root"},
             {(dir / "secret-ish").string(), "placeholder", 0600, "root"}};
  AgentOptions o;
  o.profile_path = (dir / "profile.d/cloister.sh").string();
  o.log = [](std::string_view) {};
  ApplySetup(c, o);
  EXPECT_EQ(Slurp(dir / "profile.d/cloister.sh"),
            ProfileScript({{"CLOISTER_WORKSPACE", "ws"}}));
  EXPECT_EQ(Slurp(dir / "etc/cloister/ca.pem"), "PEM\n");
  struct stat st;
  ASSERT_EQ(stat((dir / "secret-ish").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  fs::remove_all(dir);
}

TEST(AgentSetupTest, InstallsTheProxyCaOnceIntoTheTrustBundle) {
  auto dir = TempDir("ca");
  const std::string pem = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
  const std::string system = "-----BEGIN CERTIFICATE-----\nSYSTEM\n-----END CERTIFICATE-----";
  std::ofstream((dir / "bundle.crt").string()) << system;  // no trailing newline
  AgentConfig c;
  c.home_device = "";
  c.ca_certificate = pem;
  AgentOptions o;
  o.profile_path = (dir / "profile.sh").string();
  o.ca_file = (dir / "local/cloister.crt").string();
  o.ca_bundle = (dir / "bundle.crt").string();
  o.log = [](std::string_view) {};
  ApplySetup(c, o);
  EXPECT_EQ(Slurp(dir / "local/cloister.crt"), pem);
  EXPECT_EQ(Slurp(dir / "bundle.crt"), system + "\n" + pem);
  // A second boot (the bundle is on the persistent system disk) does not append it again.
  ApplySetup(c, o);
  EXPECT_EQ(Slurp(dir / "bundle.crt"), system + "\n" + pem);
  // The busybox test image has no bundle at all: it is created.
  o.ca_bundle = (dir / "new/ca-certificates.crt").string();
  ApplySetup(c, o);
  EXPECT_EQ(Slurp(dir / "new/ca-certificates.crt"), pem);
  fs::remove_all(dir);
}

TEST(AgentConfigTest, CaCertificateMustBePem) {
  auto ok = ParseAgentConfig(R"({"version":1,"workspace":"w","ca_certificate":"-----BEGIN CERTIFICATE-----\nx\n"})");
  ASSERT_TRUE(ok.ok()) << ok.error().message();
  EXPECT_EQ(ok->ca_certificate.substr(0, 11), "-----BEGIN ");
  EXPECT_FALSE(ParseAgentConfig(R"({"version":1,"workspace":"w","ca_certificate":"not a cert"})").ok());
  EXPECT_FALSE(ParseAgentConfig(R"({"version":1,"workspace":"w","ca_certificate":7})").ok());
}

TEST(AgentTest, FindsTheVirtioPortByNameAndMakesItsNode) {
  auto dir = TempDir("vport");
  fs::create_directories(dir / "sys/vport0p1");
  fs::create_directories(dir / "sys/vport0p2");
  std::ofstream(dir / "sys/vport0p1/name") << "org.qemu.guest_agent.0\n";
  std::ofstream(dir / "sys/vport0p2/name") << "org.cloister.channel.0\n";
  std::ofstream(dir / "sys/vport0p2/dev") << "1:3\n";  // /dev/null's numbers
  fs::create_directories(dir / "dev");
  auto p = FindVirtioPort("org.cloister.channel.0", (dir / "sys").string(), (dir / "dev").string());
  if (geteuid() != 0) {
    EXPECT_FALSE(p.ok());  // mknod needs root
  } else {
    ASSERT_TRUE(p.ok()) << p.error().message();
    EXPECT_EQ(*p, (dir / "dev/vport0p2").string());
    struct stat st;
    ASSERT_EQ(stat(p->c_str(), &st), 0);
    EXPECT_TRUE(S_ISCHR(st.st_mode));
  }
  EXPECT_EQ(FindVirtioPort("org.other", (dir / "sys").string(), (dir / "dev").string())
                .error()
                .code(),
            ErrorCode::kNotFound);
  fs::remove_all(dir);
}

TEST(AgentTest, TerminalProbeNeedsARealAnswer) {
  UserInfo me;
  me.name = "root";
  me.uid = geteuid();
  me.gid = getegid();
  me.home = "/";
  me.shell = "/bin/sh";
  std::vector<std::string> env = {"PATH=/usr/bin:/bin", "HOME=/", "TERM=xterm"};
  EXPECT_TRUE(CheckTerminal(me, env, false, 20s).ok());
  // `cat` echoes what it is sent but computes nothing: the probe must not pass.
  me.shell = "/bin/cat";
  auto st = CheckTerminal(me, env, false, 2s);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.error().message().find("did not answer"), std::string::npos);
}

// The whole agent against a host Mux on a unix socket.
TEST(AgentTest, ServesExecForwardsListenersAndSendsReadyAfterTheProbe) {
  auto dir = TempDir("full");
  fs::create_directories(dir / "home");
  std::ofstream(dir / "passwd") << "root:x:0:0:root:" << (dir / "home").string() << ":/bin/sh\n";
  std::ofstream(dir / "group") << "root:x:0:\n";
  std::string fwd = (dir / "fwd.sock").string();
  nlohmann::json cfg = {{"version", 1},
                        {"workspace", "ws1"},
                        {"boot_id", "b00t"},
                        {"user", "root"},
                        {"env", {{"CLOISTER_WORKSPACE", "ws1"}, {"TMUX_TMPDIR", dir.string()}}},
                        {"forwards", {{{"listen", "unix:" + fwd}, {"service", "proxy"}}}}};
  std::ofstream(dir / "config.json") << cfg.dump();

  std::string chan = (dir / "chan.sock").string();
  int lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, chan.c_str(), sizeof addr.sun_path - 1);
  ASSERT_EQ(bind(lfd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(listen(lfd, 1), 0);

  AgentOptions o;
  o.config_path = (dir / "config.json").string();
  o.channel_path = chan;
  o.setup = false;
  o.passwd_path = (dir / "passwd").string();
  o.group_path = (dir / "group").string();
  o.switch_user = false;
  o.log = [](std::string_view) {};
  std::thread([o] { RunAgent(o); }).detach();  // the agent runs for the rest of the process

  pollfd p{lfd, POLLIN, 0};
  ASSERT_EQ(poll(&p, 1, 20000), 1);
  int cfd = accept4(lfd, nullptr, nullptr, SOCK_CLOEXEC);
  ASSERT_GE(cfd, 0);
  std::mutex mu;
  std::condition_variable cv;
  std::string ready;
  channel::MuxOptions ho;
  ho.on_ready = [&](const std::string& info) {
    std::lock_guard<std::mutex> l(mu);
    ready = info;
    cv.notify_all();
  };
  auto host = channel::Mux::Create(cfd, ho).value();
  host->RegisterService("proxy", [](int fd, const std::vector<std::string>&) {
    std::thread([fd] {
      char buf[256];
      ssize_t n = read(fd, buf, sizeof buf);
      if (n > 0) {
        std::string reply = "host-proxy:" + std::string(buf, static_cast<size_t>(n));
        ssize_t w = write(fd, reply.data(), reply.size());
        (void)w;
      }
      close(fd);
    }).detach();
  });
  ASSERT_TRUE(host->Start().ok());
  {
    std::unique_lock<std::mutex> l(mu);
    ASSERT_TRUE(cv.wait_for(l, 60s, [&] { return !ready.empty(); }));
    EXPECT_NE(ready.find("boot b00t"), std::string::npos);
  }

  // exec with the per-boot environment.
  auto sfd = host->Open(channel::kExecService, {});
  ASSERT_TRUE(sfd.ok());
  int out[2];
  ASSERT_EQ(pipe2(out, O_CLOEXEC), 0);
  channel::ExecRequest r;
  r.user = "root";
  r.argv = {"sh", "-c", "echo $CLOISTER_WORKSPACE; exit 42"};
  auto exit = channel::RunExec(*sfd, r, channel::ExecIo{-1, out[1], out[1]});
  close(*sfd);
  close(out[1]);
  char buf[256];
  ssize_t n = read(out[0], buf, sizeof buf);
  close(out[0]);
  ASSERT_TRUE(exit.ok()) << exit.error().message();
  EXPECT_EQ(exit->value, 42);
  EXPECT_EQ(std::string(buf, n > 0 ? static_cast<size_t>(n) : 0), "ws1\n");

  // A guest-local listener reaches the host service through the channel.
  int c = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un fa{};
  fa.sun_family = AF_UNIX;
  std::strncpy(fa.sun_path, fwd.c_str(), sizeof fa.sun_path - 1);
  ASSERT_EQ(connect(c, reinterpret_cast<sockaddr*>(&fa), sizeof fa), 0);
  ASSERT_EQ(write(c, "ping", 4), 4);
  std::string got;
  while (true) {
    pollfd cp{c, POLLIN, 0};
    if (poll(&cp, 1, 20000) != 1) break;
    ssize_t k = read(c, buf, sizeof buf);
    if (k <= 0) break;
    got.append(buf, static_cast<size_t>(k));
  }
  close(c);
  EXPECT_EQ(got, "host-proxy:ping");

  // The tmux session exists if tmux is installed here.
  if (ProgramExists("tmux")) {
    RunOptions ro;
    ro.env_set = {{"TMUX_TMPDIR", dir.string()}};
    auto has = RunProcess({"tmux", "has-session", "-t", "cloister"}, ro);
    ASSERT_TRUE(has.ok());
    EXPECT_EQ(has->exit_code, 0) << has->err;
    (void)RunProcess({"tmux", "kill-server"}, ro);
  }
  host->Stop();
  close(lfd);
}

}  // namespace
}  // namespace cloister::guest
