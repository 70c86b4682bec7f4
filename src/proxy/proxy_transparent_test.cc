// Transparent mode (Proxy::ServeTransparent) driven by real curl through TransparentRelay, which
// does on loopback what the guest agent does for a redirected connection (header line, then the
// client's bytes). curl gets no proxy settings: --connect-to sends it to the relay while SNI and
// Host name the real destination. Also the egress policy in both modes, opaque tunnels, and the
// one detector both modes share. Label: integration (curl). Nothing leaves 127.0.0.1.
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>

#include "base/subprocess.h"
#include "proxy/test_env.h"
#include "proxy/transparent_relay.h"

namespace cloister::proxy::testing {
namespace {

// A TCP server on 127.0.0.1:0 that optionally speaks first (a banner line), then echoes.
class RawServer {
 public:
  explicit RawServer(std::string banner) : banner_(std::move(banner)) {
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    EXPECT_EQ(bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    EXPECT_EQ(listen(fd_, 16), 0);
    getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] {
      for (;;) {
        int c = accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
        if (c < 0) return;
        ++accepted_;
        std::thread([this, c] {
          if (!banner_.empty()) (void)!send(c, banner_.data(), banner_.size(), MSG_NOSIGNAL);
          char b[4096];
          for (;;) {
            ssize_t n = read(c, b, sizeof b);
            if (n <= 0) break;
            (void)!send(c, b, static_cast<size_t>(n), MSG_NOSIGNAL);
          }
          close(c);
        }).detach();
      }
    });
  }
  ~RawServer() {
    shutdown(fd_, SHUT_RDWR);
    thread_.join();
    close(fd_);
  }
  std::string Address() const { return "127.0.0.1:" + std::to_string(port_); }
  int accepted() const { return accepted_.load(); }

 private:
  std::string banner_;
  int fd_ = -1;
  uint16_t port_ = 0;
  std::atomic<int> accepted_{0};
  std::thread thread_;
};

int ConnectLoopback(uint16_t port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(port);
  EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  return fd;
}

// Reads until `n` bytes, end of stream or 10 s.
std::string ReadUpTo(int fd, size_t n) {
  std::string got;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (got.size() < n) {
    int left = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                    deadline - std::chrono::steady_clock::now()).count());
    pollfd p{fd, POLLIN, 0};
    if (left <= 0 || poll(&p, 1, left) <= 0) break;
    char b[4096];
    ssize_t k = read(fd, b, std::min(sizeof b, n - got.size()));
    if (k <= 0) break;
    got.append(b, static_cast<size_t>(k));
  }
  return got;
}

class TransparentTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!ProgramExists("curl")) GTEST_SKIP() << "curl not installed";
  }
  // TLS upstream: 200 + "real" when a real credential arrived, 401 otherwise.
  void StartTlsUpstream() {
    auto up = FakeUpstream::Start(env_.upstream_ca, [](const SeenRequest& r, ResponseWriter& w) {
      std::string all;
      for (const auto& [k, v] : r.headers) all += v + "\n";
      bool real = all.find("REAL") != std::string::npos;
      w.Send(real ? 200 : 401, {{"Content-Type", "text/plain"}}, real ? "real" : "placeholder");
    });
    ASSERT_TRUE(up.ok());
    tls_up_ = std::move(up).value();
  }
  void StartPlainUpstream() {
    auto up = FakeUpstream::Start(nullptr, Hello());
    ASSERT_TRUE(up.ok());
    plain_up_ = std::move(up).value();
  }
  std::unique_ptr<TransparentRelay> Relay(const std::string& host, uint16_t port) {
    auto r = TransparentRelay::Start(env_.proxy.get(), host + " " + std::to_string(port) + "\n");
    EXPECT_TRUE(r.ok());
    return r.ok() ? std::move(r).value() : nullptr;
  }
  // curl with no proxy: the relay plays the guest's redirect.
  CurlOut Transparent(const TransparentRelay& relay, const std::string& host, uint16_t port,
                      const std::string& url, std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {"--cacert", env_.ca_file, "--connect-to",
                                     host + ":" + std::to_string(port) + ":127.0.0.1:" +
                                         std::to_string(relay.port())};
    args.insert(args.end(), extra.begin(), extra.end());
    args.push_back(url);
    return RunCurl(args);
  }
  CurlOut ViaProxy(const std::string& url, std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {"--cacert", env_.ca_file, "-x", env_.ProxyUrl()};
    args.insert(args.end(), extra.begin(), extra.end());
    args.push_back(url);
    return RunCurl(args);
  }
  // Trace records matching `pred`, once at least `n` records exist.
  std::vector<TraceRecord> Records(size_t n, const std::function<bool(const TraceRecord&)>& pred) {
    std::vector<TraceRecord> out;
    for (const TraceRecord& r : env_.TraceAtLeast(n)) {
      if (pred(r)) out.push_back(r);
    }
    return out;
  }

  ProxyEnv env_;
  std::unique_ptr<FakeUpstream> tls_up_, plain_up_;
};

TEST_F(TransparentTest, TlsIsInterceptedAndThePlaceholderSwapped) {
  StartTlsUpstream();
  env_.StartProxy({{"api.anthropic.com:443", tls_up_->Address()}});
  auto relay = Relay("api.anthropic.com", 443);
  CurlOut r = Transparent(*relay, "api.anthropic.com", 443, "https://api.anthropic.com/v1/messages",
                          {"-H", "x-api-key: " + env_.Placeholder(0), "-d", "{}"});
  EXPECT_EQ(r.code, 200) << r.err;
  EXPECT_EQ(r.body, "real");
  ASSERT_EQ(tls_up_->requests().size(), 1u);
  EXPECT_EQ(tls_up_->requests()[0].sni, "api.anthropic.com");
  EXPECT_EQ(tls_up_->requests()[0].Header("x-api-key"), kRealAnthropic);
  auto recs = Records(1, [](const TraceRecord& t) { return t.mode == "transparent"; });
  ASSERT_EQ(recs.size(), 1u);
  EXPECT_EQ(recs[0].host, "api.anthropic.com");
  EXPECT_EQ(recs[0].port, 443);
  EXPECT_EQ(recs[0].status, 200);
  EXPECT_EQ(recs[0].swaps, std::vector<std::string>{"anthropic"});
  EXPECT_FALSE(env_.proxy->compromised());
}

TEST_F(TransparentTest, SniOtherThanTheResolvedNameIsRefused) {
  StartTlsUpstream();
  env_.StartProxy({{"api.anthropic.com:443", tls_up_->Address()},
                   {"other.example.test:443", tls_up_->Address()}});
  // The guest resolved api.anthropic.com, but the client names other.example.test in TLS.
  auto relay = Relay("api.anthropic.com", 443);
  CurlOut r = Transparent(*relay, "other.example.test", 443, "https://other.example.test/",
                          {"-H", "x-api-key: " + env_.Placeholder(0)});
  EXPECT_EQ(r.code, 0);
  EXPECT_TRUE(tls_up_->requests().empty());
  auto recs = Records(1, [](const TraceRecord& t) { return t.status == 421; });
  ASSERT_EQ(recs.size(), 1u);
  EXPECT_EQ(recs[0].mode, "transparent");
  EXPECT_EQ(recs[0].host, "api.anthropic.com");
  EXPECT_NE(recs[0].error.find("SNI other.example.test"), std::string::npos) << recs[0].error;
}

TEST_F(TransparentTest, PlainHttpIsProxiedWithTheHostChecked) {
  StartPlainUpstream();
  env_.StartProxy({{"plain.example.test:8080", plain_up_->Address()}});
  auto relay = Relay("plain.example.test", 8080);
  CurlOut ok = Transparent(*relay, "plain.example.test", 8080, "http://plain.example.test:8080/a?q=1");
  EXPECT_EQ(ok.code, 200) << ok.err;
  EXPECT_EQ(ok.body, "hello");
  ASSERT_EQ(plain_up_->requests().size(), 1u);
  EXPECT_EQ(plain_up_->requests()[0].target, "/a?q=1");
  EXPECT_EQ(plain_up_->requests()[0].Header("host"), "plain.example.test:8080");
  // Another name in Host: 421, nothing forwarded.
  CurlOut bad = Transparent(*relay, "plain.example.test", 8080, "http://plain.example.test:8080/b",
                            {"-H", "Host: elsewhere.example.test"});
  EXPECT_EQ(bad.code, 421);
  EXPECT_EQ(plain_up_->requests().size(), 1u);
  auto recs = Records(2, [](const TraceRecord& t) { return t.mode == "transparent"; });
  ASSERT_EQ(recs.size(), 2u);
  EXPECT_EQ(recs[0].status, 200);
  EXPECT_EQ(recs[0].path, "/a");
  EXPECT_EQ(recs[1].status, 421);
  EXPECT_NE(recs[1].error.find("elsewhere.example.test"), std::string::npos);
}

TEST_F(TransparentTest, EgressPolicyRefusesInBothModesAndTracesWhy) {
  StartTlsUpstream();
  StartPlainUpstream();
  env_.egress_policy.allow_all = false;
  env_.egress_policy.allow = {*ParseEgressRule("api.anthropic.com:443")};
  env_.StartProxy({{"api.anthropic.com:443", tls_up_->Address()},
                   {"blocked.example.test:443", tls_up_->Address()},
                   {"blocked.example.test:80", plain_up_->Address()}});
  // Allowed: both modes.
  auto allowed = Relay("api.anthropic.com", 443);
  EXPECT_EQ(Transparent(*allowed, "api.anthropic.com", 443, "https://api.anthropic.com/").code, 401);
  EXPECT_EQ(ViaProxy("https://api.anthropic.com/").code, 401);
  // Refused: transparent (closed), CONNECT (403), absolute-form (403).
  auto blocked = Relay("blocked.example.test", 443);
  CurlOut t = Transparent(*blocked, "blocked.example.test", 443, "https://blocked.example.test/");
  EXPECT_EQ(t.code, 0);
  CurlOut c = ViaProxy("https://blocked.example.test/");
  EXPECT_EQ(c.connect, 403) << c.err;
  CurlOut p = ViaProxy("http://blocked.example.test/");
  EXPECT_EQ(p.code, 403);
  EXPECT_NE(p.body.find("egress policy"), std::string::npos);
  EXPECT_EQ(tls_up_->requests().size(), 2u);
  EXPECT_TRUE(plain_up_->requests().empty());
  auto refused = Records(5, [](const TraceRecord& r) { return r.status == 403; });
  ASSERT_EQ(refused.size(), 3u);
  for (const TraceRecord& r : refused) {
    EXPECT_EQ(r.host, "blocked.example.test");
    EXPECT_NE(r.error.find("egress policy: blocked.example.test"), std::string::npos) << r.error;
  }
  EXPECT_EQ(refused[0].mode, "transparent");
  EXPECT_EQ(refused[1].method, "CONNECT");
  EXPECT_EQ(refused[2].mode, "");
}

TEST_F(TransparentTest, OpaqueTunnelsOnlyWhereThePolicyNamesThePort) {
  RawServer server("BANNER\n");
  env_.egress_policy.allow = {*ParseEgressRule("db.example.test:5432"),
                              *ParseEgressRule("db.example.test:443")};
  env_.tunnel_ports = {2222};
  env_.tunnel_hosts = {"git.example.test"};
  env_.sniff_ms = 200;
  env_.StartProxy({{"db.example.test:5432", server.Address()},
                   {"db.example.test:5433", server.Address()},
                   {"db.example.test:443", server.Address()},
                   {"git.example.test:2222", server.Address()}});
  {
    // Server speaks first: the client sends nothing, the proxy splices after the sniff window.
    auto relay = Relay("db.example.test", 5432);
    int fd = ConnectLoopback(relay->port());
    EXPECT_EQ(ReadUpTo(fd, 7), "BANNER\n");
    ASSERT_EQ(send(fd, "ping\n", 5, MSG_NOSIGNAL), 5);
    EXPECT_EQ(ReadUpTo(fd, 5), "ping\n");
    close(fd);
  }
  EXPECT_EQ(server.accepted(), 1);
  {
    // The SSH policy's tunnels: client speaks first (not TLS, not HTTP).
    auto relay = Relay("git.example.test", 2222);
    int fd = ConnectLoopback(relay->port());
    ASSERT_EQ(send(fd, "SSH-2.0-test\r\n", 14, MSG_NOSIGNAL), 14);
    EXPECT_EQ(ReadUpTo(fd, 7 + 14), "BANNER\nSSH-2.0-test\r\n");
    close(fd);
  }
  EXPECT_EQ(server.accepted(), 2);
  for (uint16_t port : {5433, 443}) {
    // Not named with this port (5433), or a port that is never opaque (443): closed unread.
    auto relay = Relay("db.example.test", port);
    int fd = ConnectLoopback(relay->port());
    ASSERT_EQ(send(fd, "ping\n", 5, MSG_NOSIGNAL), 5);
    EXPECT_EQ(ReadUpTo(fd, 100), "");
    close(fd);
  }
  EXPECT_EQ(server.accepted(), 2);
  auto recs = Records(4, [](const TraceRecord& r) { return r.mode == "transparent"; });
  ASSERT_EQ(recs.size(), 4u);
  std::map<uint16_t, TraceRecord> by_port;
  for (const TraceRecord& r : recs) by_port[r.port] = r;
  EXPECT_EQ(by_port[5432].status, 200);
  EXPECT_EQ(by_port[5432].path, "(tunnel)");
  EXPECT_EQ(by_port[5432].bytes_up, 5u);
  EXPECT_EQ(by_port[5432].bytes_down, 12u);
  EXPECT_EQ(by_port[2222].status, 200);
  EXPECT_EQ(by_port[5433].status, 403);
  EXPECT_NE(by_port[5433].error.find("not an opaque tunnel"), std::string::npos);
  EXPECT_EQ(by_port[443].status, 403);
}

TEST_F(TransparentTest, OneDetectorForBothModes) {
  StartTlsUpstream();
  env_.StartProxy({{"api.anthropic.com:443", tls_up_->Address()},
                   {"api.github.com:443", tls_up_->Address()}});
  // The Anthropic placeholder sent transparently to GitHub: 451, compromised.
  auto gh = Relay("api.github.com", 443);
  CurlOut leak = Transparent(*gh, "api.github.com", 443, "https://api.github.com/user",
                             {"-H", "Authorization: Bearer " + env_.Placeholder(0)});
  EXPECT_EQ(leak.code, 451);
  EXPECT_TRUE(env_.proxy->compromised());
  ASSERT_EQ(env_.Events().size(), 1u);
  EXPECT_EQ(env_.Events()[0].credential, "anthropic");
  EXPECT_EQ(env_.Events()[0].host, "api.github.com");
  // Proxy mode is now refused too (at the CONNECT: issue 15 item 12), and so is a new
  // transparent stream.
  CurlOut after = ViaProxy("https://api.anthropic.com/", {"-H", "x-api-key: " + env_.Placeholder(0)});
  EXPECT_EQ(after.connect, 451);
  auto an = Relay("api.anthropic.com", 443);
  EXPECT_EQ(Transparent(*an, "api.anthropic.com", 443, "https://api.anthropic.com/").code, 0);
  EXPECT_TRUE(tls_up_->requests().empty());
  auto recs = Records(3, [](const TraceRecord& r) { return r.status == 451; });
  ASSERT_EQ(recs.size(), 3u);
  EXPECT_TRUE(recs[0].blocked);
  EXPECT_EQ(recs[0].mode, "transparent");
  EXPECT_EQ(recs[1].mode, "");
  EXPECT_EQ(recs[2].mode, "transparent");
}

TEST_F(TransparentTest, MalformedHeaderIsClosedAndTraced) {
  env_.StartProxy({});
  for (const std::string& header : std::vector<std::string>{"Not A Header\n", std::string(400, 'a'), "host 99999\n"}) {
    auto r = TransparentRelay::Start(env_.proxy.get(), header);
    ASSERT_TRUE(r.ok());
    int fd = ConnectLoopback((*r)->port());
    EXPECT_EQ(ReadUpTo(fd, 100), "");
    close(fd);
  }
  auto recs = Records(3, [](const TraceRecord& r) { return r.status == 400; });
  EXPECT_EQ(recs.size(), 3u);
}

}  // namespace
}  // namespace cloister::proxy::testing
