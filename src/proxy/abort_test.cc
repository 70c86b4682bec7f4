// Every request the proxy reads leaves exactly one trace record, also when it ends without a whole
// response: the client gone, the upstream refusing, silent past the bound (504) or closing, the
// proxy stopping; with the reason (TraceRecord::abort) and the phases it reached. (A guest
// stream's reset and the channel's end: supervisor/egress_stream_end_test.cc.)
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <boost/asio.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>

#include "proxy/test_env.h"
#include "proxy/trace.h"

namespace cloister::proxy::testing {
namespace {

namespace asio = boost::asio;
namespace http = boost::beast::http;
using namespace std::chrono_literals;

// A raw proxy-mode client on the proxy's loopback port.
class RawClient {
 public:
  explicit RawClient(uint16_t port) : s_(io_) {
    boost::system::error_code ec;
    s_.connect({asio::ip::make_address("127.0.0.1"), port}, ec);
    EXPECT_FALSE(ec);
  }
  void Send(const std::string& bytes) {
    boost::system::error_code ec;
    asio::write(s_, asio::buffer(bytes), ec);
  }
  // Reads one response head (status 0 if none came).
  int ReadHead() {
    http::response_parser<http::string_body> p;
    boost::system::error_code ec;
    http::read_header(s_, buf_, p, ec);
    return ec ? 0 : p.get().result_int();
  }
  // Reads one whole response.
  http::response<http::string_body> Read() {
    http::response_parser<http::string_body> p;
    p.body_limit(boost::none);
    boost::system::error_code ec;
    http::read(s_, buf_, p, ec);
    auto res = p.release();
    if (ec) res.result(0);
    return res;
  }
  // Closes with a reset (SO_LINGER 0), as a client killed mid-request does.
  void Reset() {
    linger l{1, 0};
    setsockopt(s_.native_handle(), SOL_SOCKET, SO_LINGER, &l, sizeof l);
    boost::system::error_code ec;
    s_.close(ec);
  }

 private:
  asio::io_context io_;
  asio::ip::tcp::socket s_;
  boost::beast::flat_buffer buf_;
};

std::string Get(const std::string& host, const std::string& path) {
  return "GET http://" + host + path + " HTTP/1.1\r\nHost: " + host + "\r\n\r\n";
}

// The records of `path`, once at least `n` exist in the trace (bounded wait).
std::vector<TraceRecord> RecordsOf(ProxyEnv& env, const std::string& path, size_t n) {
  auto deadline = std::chrono::steady_clock::now() + 10s;
  for (;;) {
    std::vector<TraceRecord> out;
    auto all = ReadTrace(env.trace_path);
    if (all.ok()) {
      for (const TraceRecord& r : *all) {
        if (r.path == path) out.push_back(r);
      }
    }
    if (out.size() >= n || std::chrono::steady_clock::now() > deadline) return out;
    std::this_thread::sleep_for(5ms);
  }
}

TEST(TraceAbortTest, AClientGoneMidRequestOrMidResponseIsRecordedOnce) {
  Gate more;
  auto up = FakeUpstream::Start(nullptr, [&](const SeenRequest& r, ResponseWriter& w) {
    if (r.target != "/stream") {
      w.Send(200, {}, "ok");
      return;
    }
    w.StartChunked(200, {{"Content-Type", "application/octet-stream"}});
    w.Chunk("first");
    more.Wait(20s);  // until the client is gone
    std::string block(64 << 10, 'x');
    for (int i = 0; i < 64 && w.Chunk(block); ++i) {
    }
    w.End();
  });
  ASSERT_TRUE(up.ok());
  ProxyEnv env;
  env.StartProxy({{"up.test:80", (*up)->Address()}});
  {
    // Mid-request: a body promised and cut short; nothing goes upstream.
    RawClient c(env.proxy_port);
    c.Send("POST http://up.test/upload HTTP/1.1\r\nHost: up.test\r\nContent-Length: 100\r\n\r\n"
           "only ten b");
    std::this_thread::sleep_for(50ms);
    c.Reset();
  }
  auto upload = RecordsOf(env, "/upload", 1);
  ASSERT_EQ(upload.size(), 1u);
  EXPECT_EQ(upload[0].abort, kAbortClientGone);
  EXPECT_EQ(upload[0].status, 0);
  EXPECT_NE(upload[0].error.find("request body"), std::string::npos) << upload[0].error;
  {
    // Mid-response: the head and a first piece arrived, then the client left.
    RawClient c(env.proxy_port);
    c.Send(Get("up.test", "/stream"));
    EXPECT_EQ(c.ReadHead(), 200);
    c.Reset();
  }
  more.Open();
  auto stream = RecordsOf(env, "/stream", 1);
  ASSERT_EQ(stream.size(), 1u);
  EXPECT_EQ(stream[0].abort, kAbortClientGone);
  EXPECT_EQ(stream[0].status, 200);
  EXPECT_GE(stream[0].phases.first_byte_ms, 0);
  EXPECT_GE(stream[0].phases.body_ms, 0);
  env.proxy.reset();  // nothing else was recorded for either, even at the end
  EXPECT_EQ(RecordsOf(env, "/upload", 0).size(), 1u);
  EXPECT_EQ(RecordsOf(env, "/stream", 0).size(), 1u);
}

TEST(TraceAbortTest, AnUpstreamThatRefusesIs502AndRecordedWithTheConnectPhase) {
  // A port nothing listens on: bind one, then close it.
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof sa;
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa), 0);
  ASSERT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len), 0);
  close(fd);
  ProxyEnv env;
  env.StartProxy({{"down.test:80", "127.0.0.1:" + std::to_string(ntohs(sa.sin_port))}});
  RawClient c(env.proxy_port);
  c.Send(Get("down.test", "/x"));
  auto res = c.Read();
  EXPECT_EQ(res.result_int(), 502u);
  auto recs = RecordsOf(env, "/x", 1);
  ASSERT_EQ(recs.size(), 1u);
  EXPECT_EQ(recs[0].abort, kAbortUpstreamRefused);
  EXPECT_EQ(recs[0].status, 502);
  EXPECT_NE(recs[0].error.find("connect down.test:80"), std::string::npos) << recs[0].error;
  EXPECT_GE(recs[0].phases.dns_ms, 0);      // the override's lookup
  EXPECT_LT(recs[0].phases.connect_ms, 0);  // never connected
}

TEST(TraceAbortTest, AnUpstreamSilentBeyondTheBoundIs504WithTheReason) {
  Gate never;
  auto up = FakeUpstream::Start(nullptr, [&](const SeenRequest& r, ResponseWriter& w) {
    if (r.target == "/silent-body") {
      w.StartChunked(200, {});
      w.Chunk("a first piece");
      never.Wait(20s);
      w.End();
      return;
    }
    never.Wait(20s);
    w.Send(200, {}, "late");
  });
  ASSERT_TRUE(up.ok());
  // An upstream whose accept queue is full: a connect to it never completes.
  int full = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof sa;
  ASSERT_EQ(bind(full, reinterpret_cast<sockaddr*>(&sa), sizeof sa), 0);
  ASSERT_EQ(listen(full, 0), 0);
  ASSERT_EQ(getsockname(full, reinterpret_cast<sockaddr*>(&sa), &len), 0);
  std::vector<int> fillers;
  for (int i = 0; i < 2; ++i) {
    int f = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    connect(f, reinterpret_cast<sockaddr*>(&sa), sizeof sa);
    fillers.push_back(f);
  }
  std::this_thread::sleep_for(100ms);
  ProxyEnv env;
  env.upstream_idle_ms = 300;
  env.upstream_connect_ms = 300;
  env.StartProxy({{"slow.test:80", (*up)->Address()},
                  {"full.test:80", "127.0.0.1:" + std::to_string(ntohs(sa.sin_port))}});
  {
    RawClient c(env.proxy_port);
    c.Send(Get("slow.test", "/wait"));
    auto res = c.Read();
    EXPECT_EQ(res.result_int(), 504u);
    EXPECT_NE(res.body().find("no response within 300 ms"), std::string::npos) << res.body();
  }
  auto wait = RecordsOf(env, "/wait", 1);
  ASSERT_EQ(wait.size(), 1u);
  EXPECT_EQ(wait[0].abort, kAbortUpstreamTimeout);
  EXPECT_EQ(wait[0].status, 504);
  EXPECT_GE(wait[0].phases.connect_ms, 0);
  EXPECT_LT(wait[0].phases.first_byte_ms, 0);
  {
    RawClient c(env.proxy_port);
    c.Send(Get("full.test", "/connect"));
    EXPECT_EQ(c.Read().result_int(), 504u);
  }
  auto connect = RecordsOf(env, "/connect", 1);
  ASSERT_EQ(connect.size(), 1u);
  EXPECT_EQ(connect[0].abort, kAbortUpstreamTimeout);
  EXPECT_NE(connect[0].error.find("no answer within 300 ms"), std::string::npos)
      << connect[0].error;
  {
    // Silent in the middle of its body: the response is cut, and the record says why.
    RawClient c(env.proxy_port);
    c.Send(Get("slow.test", "/silent-body"));
    EXPECT_EQ(c.Read().result_int(), 0u);
  }
  auto body = RecordsOf(env, "/silent-body", 1);
  ASSERT_EQ(body.size(), 1u);
  EXPECT_EQ(body[0].abort, kAbortUpstreamTimeout);
  EXPECT_EQ(body[0].status, 200);
  EXPECT_NE(body[0].error.find("sent nothing for 300 ms"), std::string::npos) << body[0].error;
  never.Open();
  for (int f : fillers) close(f);
  close(full);
}

TEST(TraceAbortTest, AnUpstreamClosedMidResponseIsRecordedAsCut) {
  auto up = FakeUpstream::Start(nullptr, [](const SeenRequest&, ResponseWriter& w) {
    w.StartChunked(200, {});
    w.Chunk("part of it");
    w.DropAfter();  // and never the last chunk
  });
  ASSERT_TRUE(up.ok());
  ProxyEnv env;
  env.StartProxy({{"up.test:80", (*up)->Address()}});
  RawClient c(env.proxy_port);
  c.Send(Get("up.test", "/cut"));
  EXPECT_EQ(c.Read().result_int(), 0u);  // the client sees the response cut short
  auto recs = RecordsOf(env, "/cut", 1);
  ASSERT_EQ(recs.size(), 1u);
  EXPECT_EQ(recs[0].abort, kAbortUpstreamClosed);
  EXPECT_EQ(recs[0].status, 200);
  EXPECT_EQ(recs[0].bytes_down, 10u);
}

TEST(TraceAbortTest, ARequestInFlightWhenTheProxyStopsIsRecorded) {
  Gate never;
  auto up = FakeUpstream::Start(nullptr, [&](const SeenRequest&, ResponseWriter& w) {
    never.Wait(20s);
    w.Send(200, {}, "late");
  });
  ASSERT_TRUE(up.ok());
  ProxyEnv env;
  env.StartProxy({{"up.test:80", (*up)->Address()}});
  RawClient c(env.proxy_port);
  c.Send(Get("up.test", "/pending"));
  ASSERT_TRUE((*up)->WaitForRequests(1, 10s));
  env.proxy.reset();
  auto recs = RecordsOf(env, "/pending", 1);
  ASSERT_EQ(recs.size(), 1u);
  EXPECT_EQ(recs[0].abort, kAbortProxyStopped);
  never.Open();
}

// A keep-alive connection the upstream let go while idle: the next request on it gets nothing
// back, is sent again once on a new connection, and succeeds (no 502, no abort).
TEST(TraceAbortTest, AReusedConnectionTheUpstreamDroppedIsSentAgainOnce) {
  auto up = FakeUpstream::Start(nullptr, [](const SeenRequest& r, ResponseWriter& w) {
    w.Send(200, {}, "fine " + r.target);
    w.DropAfter();
  });
  ASSERT_TRUE(up.ok());
  ProxyEnv env;
  env.StartProxy({{"up.test:80", (*up)->Address()}});
  RawClient c(env.proxy_port);
  c.Send(Get("up.test", "/one"));
  EXPECT_EQ(c.Read().body(), "fine /one");
  ASSERT_TRUE((*up)->WaitForRequests(1, 10s));
  std::this_thread::sleep_for(100ms);  // the upstream's close has landed
  c.Send(Get("up.test", "/two"));
  auto two = c.Read();
  EXPECT_EQ(two.result_int(), 200u);
  EXPECT_EQ(two.body(), "fine /two");
  auto recs = RecordsOf(env, "/two", 1);
  ASSERT_EQ(recs.size(), 1u);
  EXPECT_EQ(recs[0].abort, "");
  EXPECT_GE(recs[0].phases.connect_ms, 0);  // the new connection's
  EXPECT_EQ((*up)->connections(), 2u);
}

}  // namespace
}  // namespace cloister::proxy::testing
