// Transparent egress, guest side, on the host (label integration): the real static
// `cloister-agent` runs in a network namespace this test creates (`unshare -n`), installs its route
// and nftables rules there, answers DNS, and forwards redirected TCP to the host's `egress`
// service, which this test serves over the agent's channel (a unix socket) with a fake: it records
// each header line and answers plain HTTP, echoes, or refuses. Real clients (glibc getent, busybox
// nslookup, curl, python sockets) run inside the namespace (`nsenter`), with the agent's
// resolv.conf bind-mounted in a private mount namespace. Nothing here can reach another address:
// the namespace has only lo.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <functional>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "base/strings.h"
#include "base/subprocess.h"
#include "base/testing_file.h"
#include "channel/mux.h"
#include "guest/nft_batch.h"
#include "guest/transparent.h"

namespace cloister::guest {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

using testfile::Slurp;

// Reads one line (at most 300 bytes) from fd; "" on EOF or overflow.
std::string ReadLine(int fd) {
  std::string line;
  char c;
  while (line.size() <= 300) {
    ssize_t n = read(fd, &c, 1);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return "";
    line.push_back(c);
    if (c == '\n') return line;
  }
  return "";
}

void WriteAll(int fd, const std::string& s) {
  size_t off = 0;
  while (off < s.size()) {
    ssize_t n = write(fd, s.data() + off, s.size() - off);
    if (n <= 0) return;
    off += static_cast<size_t>(n);
  }
}

class TransparentNetnsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root for a network namespace and nftables";
    for (const char* tool : {"unshare", "nsenter", "nft", "curl", "getent", "busybox", "python3"}) {
      ASSERT_TRUE(ProgramExists(tool)) << tool << " is not installed (scripts/install-deps.sh test)";
    }
    const char* bin = std::getenv("CLOISTER_BINARY_DIR");
    ASSERT_NE(bin, nullptr) << "CLOISTER_BINARY_DIR is not set (run through ctest)";
    agent_ = std::string(bin) + "/src/guest/cloister-agent";
    ASSERT_TRUE(fs::exists(agent_)) << agent_;
    dir_ = fs::temp_directory_path() / ("cloister-tns-" + std::to_string(getpid()) + "-" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    resolv_ = (dir_ / "resolv.conf").string();
    log_ = (dir_ / "agent.log").string();
    // No forwards (the defaults would create a socket under /run on this host), a user that does
    // not exist (no ready probe, no tmux), no system setup beyond transparent egress.
    nlohmann::json cfg = {{"version", 1},
                          {"workspace", "tns"},
                          {"hostname", "tns-host"},
                          {"boot_id", "b"},
                          {"user", "cloister-no-such-user"},
                          {"forwards", nlohmann::json::array()},
                          {"transparent", {{"service", "egress"}, {"port", 3129}, {"dns_port", 53}}}};
    std::ofstream(dir_ / "config.json") << cfg.dump();

    std::string chan = (dir_ / "chan.sock").string();
    int lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, chan.c_str(), sizeof addr.sun_path - 1);
    ASSERT_EQ(bind(lfd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    ASSERT_EQ(listen(lfd, 1), 0);

    std::vector<std::string> argv = {"unshare", "-n", "--", agent_, "--config",
                                     (dir_ / "config.json").string(), "--channel-socket", chan,
                                     "--no-setup", "--resolv-conf", resolv_};
    pid_ = fork();
    ASSERT_GE(pid_, 0);
    if (pid_ == 0) {
      int logfd = open(log_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      dup2(logfd, 2);
      dup2(logfd, 1);
      std::vector<char*> args;
      for (auto& a : argv) args.push_back(a.data());
      args.push_back(nullptr);
      execvp(args[0], args.data());
      _exit(127);
    }
    pollfd p{lfd, POLLIN, 0};
    ASSERT_EQ(poll(&p, 1, 30000), 1) << Slurp(log_);
    int cfd = accept4(lfd, nullptr, nullptr, SOCK_CLOEXEC);
    close(lfd);
    ASSERT_GE(cfd, 0);
    channel::MuxOptions mo;
    auto mux = channel::Mux::Create(cfd, mo);
    ASSERT_TRUE(mux.ok());
    mux_ = std::move(*mux);
    mux_->RegisterService("egress", [this](int fd, const std::vector<std::string>&) {
      std::thread([this, fd] { ServeEgress(fd); }).detach();
    });
    ASSERT_TRUE(mux_->Start().ok());
    // The agent is up once its rules are in (it logs after binding and loading them).
    auto deadline = std::chrono::steady_clock::now() + 30s;
    while (Slurp(log_).find("egress: DNS on port") == std::string::npos) {
      ASSERT_LT(std::chrono::steady_clock::now(), deadline) << Slurp(log_);
      std::this_thread::sleep_for(50ms);  // polling the agent's log for a condition, bounded
    }
    ASSERT_NE(Slurp(log_).find("egress: redirect rules loaded"), std::string::npos) << Slurp(log_);
  }

  void TearDown() override {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      int st;
      waitpid(pid_, &st, 0);
    }
    if (mux_) mux_->Stop();
    if (!dir_.empty() && !HasFailure()) fs::remove_all(dir_);
  }

  // The host side of `egress`: the header line, then by name: refuse.test -> close at once,
  // echo.test -> echo bytes until EOF, anything else -> one plain HTTP answer naming the header
  // and the request's Host.
  void ServeEgress(int fd) {
    std::string header = ReadLine(fd);
    {
      std::lock_guard<std::mutex> l(mu_);
      headers_.push_back(header);
    }
    if (StartsWith(header, "refuse.test ") || header.empty()) {
      close(fd);
      return;
    }
    if (StartsWith(header, "echo.test ")) {
      char buf[4096];
      ssize_t n;
      while ((n = read(fd, buf, sizeof buf)) > 0) WriteAll(fd, std::string(buf, static_cast<size_t>(n)));
      close(fd);
      return;
    }
    std::string req;
    char buf[4096];
    while (req.find("\r\n\r\n") == std::string::npos && req.size() < 65536) {
      ssize_t n = read(fd, buf, sizeof buf);
      if (n <= 0) break;
      req.append(buf, static_cast<size_t>(n));
    }
    std::string host;
    for (const std::string& line : Split(req, '\n')) {
      if (StartsWith(ToLower(line), "host:")) host = Trim(line.substr(5));
    }
    std::string body = "upstream saw header [" + Trim(header) + "] host [" + host + "]\n";
    WriteAll(fd, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: " +
                     std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body);
    close(fd);
  }

  std::vector<std::string> Headers() {
    std::lock_guard<std::mutex> l(mu_);
    return headers_;
  }

  // Runs argv inside the agent's network namespace, with the agent's resolv.conf in place (a
  // private mount namespace, so the host's file is untouched).
  RunOutput InNs(const std::vector<std::string>& argv) {
    std::vector<std::string> full = {"nsenter", "--net=/proc/" + std::to_string(pid_) + "/ns/net", "--",
                                     "unshare", "-m", "--", "sh", "-c",
                                     "mount --bind \"$0\" /etc/resolv.conf && exec \"$@\"", resolv_};
    full.insert(full.end(), argv.begin(), argv.end());
    RunOptions ro;
    ro.timeout = 60s;
    auto r = RunProcess(full, ro);
    EXPECT_TRUE(r.ok());
    return r.ok() ? *r : RunOutput{};
  }

  std::string agent_, resolv_, log_;
  fs::path dir_;
  pid_t pid_ = -1;
  std::unique_ptr<channel::Mux> mux_;
  std::mutex mu_;
  std::vector<std::string> headers_;
};

// A python one-liner: a raw TCP socket to argv[1]:argv[2] that sends argv[3], half-closes, prints
// what came back (or the error's name).
constexpr char kRawTcp[] =
    "import socket,sys\n"
    "try:\n"
    "  s=socket.create_connection((sys.argv[1],int(sys.argv[2])),10)\n"
    "  s.sendall(sys.argv[3].encode()); s.shutdown(socket.SHUT_WR)\n"
    "  d=b''\n"
    "  while True:\n"
    "    c=s.recv(4096)\n"
    "    if not c: break\n"
    "    d+=c\n"
    "  print('got:'+d.decode())\n"
    "except (ConnectionResetError, BrokenPipeError): print('error:reset')\n"
    "except Exception as e: print('error:'+type(e).__name__)\n";

// UDP to argv[1]:argv[2] (QUIC-like): prints how the send/receive ended.
constexpr char kUdp[] =
    "import socket,sys\n"
    "s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM); s.settimeout(5)\n"
    "s.connect((sys.argv[1],int(sys.argv[2])))\n"
    "try:\n"
    "  s.send(b'quic-initial'); s.recv(100); print('answered')\n"
    "except Exception as e: print('error:'+type(e).__name__)\n";

TEST_F(TransparentNetnsTest, NamesGetSyntheticAddressesAndTcpReachesTheHostServiceByName) {
  // glibc (getent) and busybox nslookup agree on one synthetic address per name; no IPv6.
  RunOutput g = InNs({"getent", "ahosts", "api.example.test"});
  ASSERT_EQ(g.exit_code, 0) << g.err;
  std::string addr = g.out.substr(0, g.out.find(' '));
  EXPECT_TRUE(StartsWith(addr, "198.18.") || StartsWith(addr, "198.19.")) << g.out;
  EXPECT_EQ(g.out.find(':'), std::string::npos) << "an IPv6 answer: " << g.out;
  RunOutput ns = InNs({"busybox", "nslookup", "api.example.test", "127.0.0.1"});
  EXPECT_NE(ns.out.find(addr), std::string::npos) << ns.out << ns.err;
  // A resolver hard-coded to a public server is answered by the agent too (port 53 redirect).
  RunOutput pub = InNs({"busybox", "nslookup", "api.example.test", "192.0.2.53"});
  EXPECT_NE(pub.out.find(addr), std::string::npos) << pub.out << pub.err;
  RunOutput rev = InNs({"getent", "hosts", addr});
  EXPECT_NE(rev.out.find("api.example.test"), std::string::npos) << rev.out;

  // curl with no proxy setting: its plain HTTP reaches the host service with the name and port.
  RunOutput c = InNs({"curl", "-sS", "--noproxy", "*", "--max-time", "20", "http://api.example.test:8080/v1/x"});
  ASSERT_EQ(c.exit_code, 0) << c.err << Slurp(log_);
  EXPECT_EQ(c.out, "upstream saw header [api.example.test 8080] host [api.example.test:8080]\n");

  // A raw TCP socket (not HTTP) is relayed both ways with half-close.
  RunOutput raw = InNs({"python3", "-c", kRawTcp, "echo.test", "7000", "ping over a raw socket"});
  EXPECT_EQ(raw.out, "got:ping over a raw socket\n") << raw.err;

  // The host refusing (closing before any byte) resets the client's connection.
  RunOutput refused = InNs({"python3", "-c", kRawTcp, "refuse.test", "80", "x"});
  EXPECT_EQ(refused.out, "error:reset\n") << refused.err;

  // A literal IP never resolved is refused in the guest: no stream reaches the host.
  size_t before = Headers().size();
  RunOutput lit = InNs({"python3", "-c", kRawTcp, "203.0.113.7", "443", "x"});
  EXPECT_EQ(lit.out, "error:reset\n") << lit.err;
  // UDP (QUIC) has no path: the send fails at once (the filter chain rejects it in the guest's
  // own output path: EPERM), so clients fall back to TCP without waiting.
  RunOutput udp = InNs({"python3", "-c", kUdp, addr, "443"});
  EXPECT_EQ(udp.out, "error:PermissionError\n") << udp.err;

  std::vector<std::string> h = Headers();
  EXPECT_EQ(h.size(), before);
  ASSERT_EQ(h.size(), 3u);
  EXPECT_EQ(h[0], "api.example.test 8080\n");
  EXPECT_EQ(h[1], "echo.test 7000\n");
  EXPECT_EQ(h[2], "refuse.test 80\n");
  EXPECT_NE(Slurp(log_).find("refused TCP to 203.0.113.7:443"), std::string::npos) << Slurp(log_);
}

TEST_F(TransparentNetnsTest, RootFlushingTheRulesGetsNoPathOut) {
  RunOutput g = InNs({"getent", "hosts", "api.example.test"});
  ASSERT_EQ(g.exit_code, 0);
  std::string addr = g.out.substr(0, g.out.find(' '));
  RunOutput flush = InNs({"nft", "flush", "ruleset"});
  ASSERT_EQ(flush.exit_code, 0) << flush.err;
  // The synthetic address (refused at once: a local route, nothing listens), a literal IP, and the
  // listener's own port: nothing gets through.
  RunOutput c1 = InNs({"curl", "-sS", "--noproxy", "*", "--max-time", "20", "http://api.example.test:8080/"});
  EXPECT_EQ(c1.exit_code, 7) << c1.err;  // could not connect: the local route, nothing listens
  // Any other address loops into lo and is dropped: nothing answers, nothing leaves.
  RunOutput c2 = InNs({"curl", "-sS", "--noproxy", "*", "--max-time", "3", "http://203.0.113.7/"});
  EXPECT_EQ(c2.exit_code, 28) << c2.err;  // timed out
  RunOutput c3 = InNs({"python3", "-c", kRawTcp, addr, "3129", "GET / HTTP/1.0\r\n\r\n"});
  EXPECT_EQ(c3.out, "error:reset\n") << c3.err;
  EXPECT_TRUE(Headers().empty());
  // Without the rules the connection has no NAT record (or one to the listener itself): refused.
  EXPECT_NE(Slurp(log_).find("egress: refused a"), std::string::npos) << Slurp(log_);
}

// A container in the guest: its own network namespace behind a veth pair (10.99.0.2 -> the guest's
// 10.99.0.1, default route through it). Its DNS to a public server and its TCP to a synthetic
// address are redirected in the guest's prerouting chain to the agent, like the guest's own.
TEST_F(TransparentNetnsTest, AContainerInTheGuestIsRedirectedThroughPrerouting) {
  pid_t container = fork();
  ASSERT_GE(container, 0);
  if (container == 0) {
    execlp("unshare", "unshare", "-n", "--", "sleep", "300", static_cast<char*>(nullptr));
    _exit(127);
  }
  std::string cns = "--net=/proc/" + std::to_string(container) + "/ns/net";
  auto in_container = [&](std::vector<std::string> argv) {
    std::vector<std::string> full = {"nsenter", cns, "--"};
    full.insert(full.end(), argv.begin(), argv.end());
    RunOptions ro;
    ro.timeout = 60s;
    auto r = RunProcess(full, ro);
    return r.ok() ? *r : RunOutput{};
  };
  // Wait until `unshare` has made the container's namespace (its ns link differs from ours).
  auto deadline = std::chrono::steady_clock::now() + 10s;
  while (fs::read_symlink("/proc/" + std::to_string(container) + "/ns/net") ==
         fs::read_symlink("/proc/self/ns/net")) {
    ASSERT_LT(std::chrono::steady_clock::now(), deadline);
    std::this_thread::sleep_for(20ms);  // polling for the child's unshare, bounded
  }
  auto ok = [](const RunOutput& r) { return r.exit_code == 0; };
  EXPECT_TRUE(ok(InNs({"ip", "link", "add", "v0", "type", "veth", "peer", "name", "v1", "netns",
                       std::to_string(container)})));
  EXPECT_TRUE(ok(InNs({"ip", "addr", "add", "10.99.0.1/24", "dev", "v0"})));
  EXPECT_TRUE(ok(InNs({"ip", "link", "set", "v0", "up"})));
  EXPECT_TRUE(ok(in_container({"ip", "link", "set", "lo", "up"})));
  EXPECT_TRUE(ok(in_container({"ip", "addr", "add", "10.99.0.2/24", "dev", "v1"})));
  EXPECT_TRUE(ok(in_container({"ip", "link", "set", "v1", "up"})));
  EXPECT_TRUE(ok(in_container({"ip", "route", "add", "default", "via", "10.99.0.1"})));

  RunOutput dns = in_container({"busybox", "nslookup", "api.example.test", "192.0.2.53"});
  std::string addr;
  for (const std::string& line : Split(dns.out, '\n')) {
    if (StartsWith(line, "Address: 198.1")) addr = Trim(line.substr(9));
  }
  ASSERT_FALSE(addr.empty()) << dns.out << dns.err;
  RunOutput raw = in_container({"python3", "-c", kRawTcp, addr, "7000", "from a container"});
  // The host fake answers HTTP to whatever it got: its body names the header the agent sent.
  EXPECT_NE(raw.out.find("upstream saw header [api.example.test 7000]"), std::string::npos)
      << raw.out << raw.err;
  std::vector<std::string> h = Headers();
  ASSERT_EQ(h.size(), 1u);
  EXPECT_EQ(h[0], "api.example.test 7000\n");
  kill(container, SIGKILL);
  int st;
  waitpid(container, &st, 0);
}

// What `nft list table ip cloister` prints in a network namespace of its own after `load` ran in
// it (in a child: the namespace goes with it). "load failed: WHY" when `load` failed.
std::string ListedAfter(const std::function<std::string()>& load) {
  int out[2];
  if (pipe(out) != 0) return "pipe failed";
  pid_t pid = fork();
  if (pid == 0) {
    close(out[0]);
    dup2(out[1], STDOUT_FILENO);
    dup2(out[1], STDERR_FILENO);
    if (unshare(CLONE_NEWNET) != 0) _exit(2);
    if (std::string why = load(); !why.empty()) {
      WriteAll(STDOUT_FILENO, "load failed: " + why);
      _exit(1);
    }
    execlp("nft", "nft", "list", "table", "ip", "cloister", static_cast<char*>(nullptr));
    _exit(127);
  }
  close(out[1]);
  std::string text;
  char buf[4096];
  ssize_t n;
  while ((n = read(out[0], buf, sizeof buf)) > 0) text.append(buf, static_cast<size_t>(n));
  close(out[0]);
  int st = 0;
  waitpid(pid, &st, 0);
  return text;
}

// The agent loads its rules as one nfnetlink batch (guest/nft_batch.h) and falls back to nft with
// the text ruleset: both must leave the same table, and a reload (the batch deletes the table it
// adds) must leave it once, not twice.
TEST(TransparentNetlinkTest, TheBatchLoadsTheSameRulesAsTheNftTextAndReloadsInPlace) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root for a network namespace and nftables";
  ASSERT_TRUE(ProgramExists("nft")) << "nft is not installed (scripts/install-deps.sh test)";
  const fs::path file = fs::temp_directory_path() / ("cloister-nlt-" + std::to_string(getpid()));
  for (auto [port, dns] : {std::pair<uint16_t, uint16_t>{3129, 53}, {4000, 5353}}) {
    for (bool filter : {true, false}) {
      std::ofstream(file) << (filter ? RedirectRuleset(port, dns) : RedirectNatRuleset(port, dns));
      const std::string from_text = ListedAfter([&] {
        std::string cmd = "nft -f " + file.string();
        return std::system(cmd.c_str()) == 0 ? std::string() : "nft -f";
      });
      const std::string from_batch = ListedAfter([&] {
        for (int i = 0; i < 2; ++i) {  // load twice: a reload replaces the table
          if (Status st = LoadRedirectRules(port, dns, filter); !st.ok()) return st.error().message();
        }
        return std::string();
      });
      SCOPED_TRACE("port " + std::to_string(port) + " dns " + std::to_string(dns) +
                   (filter ? " with" : " without") + " the filter chain");
      EXPECT_EQ(from_batch, from_text);
      // Both sides printed the rules, not the same error.
      EXPECT_NE(from_text.find("meta l4proto tcp redirect to :" + std::to_string(port)),
                std::string::npos)
          << from_text;
      EXPECT_NE(from_text.find("udp dport 53 redirect to :" + std::to_string(dns)),
                std::string::npos)
          << from_text;
      EXPECT_EQ(from_text.find("chain filter_output") != std::string::npos, filter) << from_text;
    }
  }
  fs::remove(file);
}

}  // namespace
}  // namespace cloister::guest
