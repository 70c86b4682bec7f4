// Transparent egress inside a real VM (issue #9's proof), in ONE boot under TCG with the test image
// and the real `cloister` binary. Nothing in the guest is told about a proxy: every client runs with
// the proxy variables removed. Upstreams are local fakes reached through CLOISTER_PROXY_RESOLVE
// (resolve-only: nothing leaves 127.0.0.1):
//   - Node's built-in `fetch` POSTs to api.anthropic.com with the placeholder key and reads a
//     streamed SSE answer incrementally (the guest itself releases the stream's end after seeing
//     its first event); the fake receives the REAL key;
//   - a raw TCP socket (Node `net`) to a host:port the egress policy allows is relayed both ways;
//     one to a host:port it does not allow is refused (reset) and traced with the reason, and its
//     upstream sees no connection;
//   - getent and busybox nslookup return synthetic addresses (198.18.0.0/15);
//   - UDP to port 443 (QUIC) fails at once;
//   - a literal IP never resolved is refused in the guest (the agent logs it on the console);
//   - root flushing every nft rule gets no connectivity at all, and the fakes see nothing more.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <thread>

#include "base/strings.h"
#include "base/subprocess.h"
#include "proxy/ca.h"
#include "proxy/fake_upstream.h"
#include "proxy/policy.h"
#include "supervisor/testing.h"

namespace cloister::guest {
namespace {

using vm::testing::Slurp;

const std::string kReal =
    "sk-ant-api03-REALxKEYxONLYxONxTHExHOSTx0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWX-_AA";

// A plain TCP server on 127.0.0.1:0 that echoes every byte back and counts connections.
class EchoServer {
 public:
  EchoServer() {
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a);
    listen(fd_, 16);
    socklen_t len = sizeof a;
    getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] {
      while (true) {
        int c = accept(fd_, nullptr, nullptr);
        if (c < 0) return;
        ++connections_;
        std::thread([c] {
          char buf[4096];
          ssize_t n;
          while ((n = read(c, buf, sizeof buf)) > 0) {
            if (write(c, buf, static_cast<size_t>(n)) != n) break;
          }
          close(c);
        }).detach();
      }
    });
  }
  ~EchoServer() {
    shutdown(fd_, SHUT_RDWR);
    thread_.join();
    close(fd_);
  }
  uint16_t port() const { return port_; }
  int connections() const { return connections_; }

 private:
  int fd_ = -1;
  uint16_t port_ = 0;
  std::atomic<int> connections_{0};
  std::thread thread_;
};

// Node's fetch with no proxy: POST a streaming request, and after the first event ask the fake
// (another fetch) to finish the stream. Prints the status, then every chunk as it arrives.
constexpr char kFetchSse[] = R"JS(
(async () => {
  const r = await fetch('https://api.anthropic.com/v1/messages', {
    method: 'POST',
    headers: {'x-api-key': process.env.ANTHROPIC_API_KEY, 'content-type': 'application/json'},
    body: JSON.stringify({model: 'm', max_tokens: 1, stream: true, messages: []}),
  });
  console.log('status ' + r.status);
  const reader = r.body.getReader();
  let got = '', released = false;
  for (;;) {
    const {value, done} = await reader.read();
    if (done) break;
    got += Buffer.from(value).toString();
    if (!released && got.includes('message_start')) {
      released = true;
      console.log('first event before the end');
      await (await fetch('https://api.anthropic.com/release')).text();
    }
  }
  console.log(got.includes('message_stop') ? 'stream complete' : 'stream cut');
})().catch(e => { console.log('error ' + (e.cause ? e.cause.code : e.message)); process.exit(3); });
)JS";

// A UDP datagram (QUIC-like) to argv host:port: prints whether the send failed at once.
constexpr char kUdp[] = R"JS(
const [host, port] = process.argv.slice(1);
const s = require('dgram').createSocket('udp4');
s.send('quic-initial', Number(port), host, e => { console.log(e ? 'error:' + e.code : 'sent'); s.close(); });
)JS";

// A raw TCP socket to argv host:port: send, half-close, print what came back or the error code.
constexpr char kRawTcp[] = R"JS(
const [host, port, msg] = process.argv.slice(1);
const s = require('net').connect(Number(port), host, () => s.end(msg));
let d = '';
s.on('data', c => d += c);
s.on('end', () => console.log('got:' + d));
s.on('error', e => console.log('error:' + e.code));
)JS";

class TransparentVmTest : public vm::testing::CliVmTest {
 protected:
  std::string Exec(const std::string& script, int* code = nullptr, const std::string& user = "dev",
                   std::vector<std::string> args = {}) {
    return CliVmTest::Exec("ws", script, code, user, args);
  }
  // Runs node with the proxy variables removed: only transparent egress can carry it.
  std::string Node(const std::string& js, std::vector<std::string> args = {}, int* code = nullptr) {
    args.insert(args.begin(), {"sh", js});  // $0, $1 (Exec passes them after `sh -c SCRIPT`)
    return Exec(
        "unset HTTPS_PROXY HTTP_PROXY https_proxy http_proxy ALL_PROXY all_proxy npm_config_proxy "
        "npm_config_https_proxy; node -e \"$1\" -- \"$2\" \"$3\" \"$4\" 2>&1",
        code, "dev", args);
  }
};

TEST_F(TransparentVmTest, ToolsWithoutProxySettingsGoThroughTheProxyAndNothingElseLeaves) {
  auto upstream_ca = proxy::CertAuthority::CreateInMemory("test upstream CA");
  ASSERT_TRUE(upstream_ca.ok());
  std::string ca_file = root_ + "/upstream-ca.pem";
  std::ofstream(ca_file) << (*upstream_ca)->cert_pem();
  proxy::testing::Gate release;
  auto fake = proxy::testing::FakeUpstream::Start(
      *upstream_ca, [&](const proxy::testing::SeenRequest& r, proxy::testing::ResponseWriter& w) {
        if (r.target == "/release") {
          release.Open();
          w.Send(200, {}, "released\n");
          return;
        }
        w.StartChunked(200, {{"Content-Type", "text/event-stream"}});
        w.Chunk("event: message_start\ndata: {\"type\":\"message_start\"}\n\n");
        release.Wait(std::chrono::seconds(240));  // until the guest has seen the first event
        w.Chunk("event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n");
        w.End();
      });
  ASSERT_TRUE(fake.ok());
  EchoServer allowed, blocked;
  env_ = {{"CLOISTER_PROXY_RESOLVE",
           "api.anthropic.com:443=" + (*fake)->Address() +
               ",echo.test:7000=127.0.0.1:" + std::to_string(allowed.port()) +
               ",blocked.test:7001=127.0.0.1:" + std::to_string(blocked.port())},
          {"CLOISTER_PROXY_UPSTREAM_CA", ca_file},
          {"CLOISTER_VAULT_KEY_BACKEND", "file"}};

  Create("ws");
  ASSERT_EQ(Cloister({"cred", "add", "ws", "anthropic"}, kReal + "\n").exit_code, 0);
  // The policy (config.json "egress", proxy/policy.h; the supervisor reads it at boot): only the
  // API, and one raw TCP port on echo.test (an entry naming a port allows an opaque tunnel there).
  ASSERT_TRUE(store_->UpdateConfig("ws", [](WorkspaceConfig& c) {
    proxy::EgressPolicy policy;
    policy.allow_all = false;
    policy.allow = {{"api.anthropic.com", 0}, {"echo.test", 7000}};
    return proxy::PutEgressPolicy(c, policy);
  }).ok());
  Start("ws");
  int code = -1;
  std::string node = Exec("node --version", &code);
  ASSERT_EQ(code, 0) << "node is not in the test image: " << node;

  // Names: synthetic addresses from glibc and busybox, one per name.
  std::string hosts = Exec("getent hosts api.anthropic.com; busybox nslookup echo.test 127.0.0.1", &code);
  EXPECT_EQ(code, 0) << hosts;
  std::string api_addr = hosts.substr(0, hosts.find(' '));
  EXPECT_TRUE(StartsWith(api_addr, "198.18.") || StartsWith(api_addr, "198.19.")) << hosts;
  EXPECT_NE(hosts.find("Address: 198.1"), std::string::npos) << hosts;

  // Node fetch, no proxy configuration: streamed SSE, the real key upstream.
  std::string fetched = Node(kFetchSse, {}, &code);
  EXPECT_EQ(code, 0) << fetched;
  EXPECT_NE(fetched.find("status 200\nfirst event before the end\nstream complete"), std::string::npos)
      << fetched;
  auto seen = (*fake)->requests();
  ASSERT_GE(seen.size(), 1u);
  EXPECT_EQ(seen[0].sni, "api.anthropic.com");
  EXPECT_EQ(seen[0].Header("x-api-key"), kReal) << "the real key must arrive upstream";

  // Raw TCP: allowed host:port relayed; another refused (reset) before reaching its upstream.
  std::string raw = Node(kRawTcp, {"echo.test", "7000", "raw bytes through the tunnel"});
  EXPECT_EQ(raw, "got:raw bytes through the tunnel\n");
  EXPECT_EQ(allowed.connections(), 1);
  std::string refused = Node(kRawTcp, {"blocked.test", "7001", "x"});
  EXPECT_EQ(refused, "error:ECONNRESET\n");
  EXPECT_EQ(blocked.connections(), 0);
  std::string trace = Cloister({"trace", "ls", "ws", "--json"}).out;
  EXPECT_NE(trace.find("blocked.test"), std::string::npos) << trace;
  EXPECT_NE(trace.find("egress policy"), std::string::npos) << trace;
  EXPECT_NE(trace.find("transparent"), std::string::npos) << trace;

  // UDP (QUIC) has no path: the send fails at once, so clients fall back to TCP without waiting.
  EXPECT_EQ(Node(kUdp, {"api.anthropic.com", "443"}), "error:EPERM\n");

  // A literal IP never resolved: refused in the guest, logged by the agent, nothing upstream.
  std::string literal = Node(kRawTcp, {"203.0.113.7", "443", "x"});
  EXPECT_EQ(literal, "error:ECONNRESET\n");
  std::string console = Slurp(store_->Paths("ws").console_log);
  EXPECT_NE(console.find("refused TCP to 203.0.113.7:443"), std::string::npos) << console;

  // Root flushes every rule: no connectivity at all, and the fakes see nothing more.
  size_t requests_before = (*fake)->requests().size();
  std::string flushed = Exec("nft flush ruleset && nft list ruleset | wc -l", &code, "root");
  ASSERT_EQ(code, 0) << flushed;
  EXPECT_EQ(Trim(flushed), "0");
  std::string after = Node(kFetchSse, {}, &code);
  EXPECT_NE(code, 0) << after;
  EXPECT_NE(after.find("error ECONNREFUSED"), std::string::npos) << after;
  EXPECT_EQ(Node(kRawTcp, {"echo.test", "7000", "x"}), "error:ECONNREFUSED\n");
  EXPECT_EQ(Node(kRawTcp, {api_addr, "3129", "x"}), "error:ECONNRESET\n");
  EXPECT_EQ((*fake)->requests().size(), requests_before);
  EXPECT_EQ(allowed.connections(), 1);
  EXPECT_EQ(blocked.connections(), 0);
}

}  // namespace
}  // namespace cloister::guest
