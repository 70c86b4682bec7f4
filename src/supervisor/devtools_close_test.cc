// CloseChromiumOverDevTools (the kept profile's Browser.close) against a fake DevTools: Boost.Beast's
// server side on a thread, over two socketpairs standing for the browser VM's two tcp streams. The
// fake plays a hostile guest too (error answers, bad target paths, garbage, oversized bodies).
//
// Bounded: asio's blocking reads poll past SO_RCVTIMEO, so each run has a watchdog that shuts the
// fake's sockets down after 10 s (the client then sees EOF) and fails the test; the fake shuts its
// ends down when done, so the client never waits on it.
#include "supervisor/devtools_close.h"

#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <chrono>
#include <future>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/buffers_to_string.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/websocket.hpp>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "base/json_util.h"

namespace cloister::vm {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;  // NOLINT
namespace http = beast::http;
namespace websocket = beast::websocket;
using Local = asio::local::stream_protocol;

constexpr char kBrowserPath[] = "/devtools/browser/2b7f-aa";

std::string VersionBody(const std::string& ws_url) {
  return nlohmann::json{{"Browser", "Chrome/120"}, {"webSocketDebuggerUrl", ws_url}}.dump();
}

std::string GoodUrl() { return std::string("ws://127.0.0.1:9222") + kBrowserPath; }

// What the fake DevTools does.
struct Script {
  enum class Http { kAnswer, kGarbage, kEndlessChunked, kCloseAtOnce };
  enum class Ws { kNone, kResult, kError, kCloseFrame, kDrop, kEventThenResult, kEventsOnly };
  Http http = Http::kAnswer;
  unsigned status = 200;
  std::string body = VersionBody(GoodUrl());
  Ws ws = Ws::kResult;
};

// What the fake saw of the client.
struct Seen {
  std::string http_method;
  std::string http_target;
  std::string ws_target;   // the WebSocket handshake's request target
  std::string ws_message;  // the first message on the WebSocket
  size_t ws_unasked_bytes = 0;  // bytes on the WebSocket stream when the script expected none
};

void ShutDown(Local::socket& s) {
  boost::system::error_code ec;
  s.shutdown(Local::socket::shutdown_both, ec);
}

void ServeHttp(int fd, const Script& script, Seen* seen) {
  asio::io_context io;
  Local::socket sock(io);
  boost::system::error_code ec;
  sock.assign(Local(), fd, ec);
  if (ec) {
    close(fd);
    return;
  }
  if (script.http == Script::Http::kCloseAtOnce) return ShutDown(sock);
  beast::flat_buffer buf;
  http::request<http::string_body> req;
  http::read(sock, buf, req, ec);
  if (ec) return ShutDown(sock);
  seen->http_method = std::string(req.method_string());
  seen->http_target = std::string(req.target());
  switch (script.http) {
    case Script::Http::kGarbage: {
      static constexpr char kNotHttp[] = "\x16\x03\x01\x02\x00\x01\x00\xff\xfe not HTTP\r\n\r\n";
      asio::write(sock, asio::buffer(kNotHttp, sizeof kNotHttp - 1), ec);
      break;
    }
    case Script::Http::kEndlessChunked: {
      // A body that never ends (4 MiB cap, so the fake itself stops): the client must stop at 64
      // KiB and close, which fails this loop's writes.
      std::string head = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n";
      asio::write(sock, asio::buffer(head), ec);
      const std::string chunk = "4000\r\n" + std::string(0x4000, 'a') + "\r\n";
      for (int i = 0; i < 256 && !ec; ++i) asio::write(sock, asio::buffer(chunk), ec);
      break;
    }
    default: {
      http::response<http::string_body> res;
      res.result(script.status);
      res.version(11);
      res.set(http::field::content_type, "application/json; charset=UTF-8");
      res.body() = script.body;
      res.prepare_payload();
      http::write(sock, res, ec);
      break;
    }
  }
  ShutDown(sock);
}

void ServeWs(int fd, const Script& script, Seen* seen) {
  if (script.ws == Script::Ws::kNone) {
    // The client must return before any handshake: it closes its end, so this reads EOF (and
    // SO_RCVTIMEO bounds it). Bytes mean a handshake: noted, and the stream shut at once so the
    // client does not wait for an answer.
    char b[1024];
    ssize_t n = recv(fd, b, sizeof b, 0);
    if (n > 0) seen->ws_unasked_bytes = static_cast<size_t>(n);
    shutdown(fd, SHUT_RDWR);
    close(fd);
    return;
  }
  asio::io_context io;
  websocket::stream<Local::socket> ws(io);
  boost::system::error_code ec;
  ws.next_layer().assign(Local(), fd, ec);
  if (ec) {
    close(fd);
    return;
  }
  beast::flat_buffer buf;
  http::request<http::string_body> upgrade;
  http::read(ws.next_layer(), buf, upgrade, ec);
  if (ec) return ShutDown(ws.next_layer());
  seen->ws_target = std::string(upgrade.target());
  ws.accept(upgrade, ec);
  if (ec) return ShutDown(ws.next_layer());
  beast::flat_buffer msg;
  ws.read(msg, ec);
  if (ec) return ShutDown(ws.next_layer());
  seen->ws_message = beast::buffers_to_string(msg.data());
  const std::string event = R"({"method":"Target.targetDestroyed","params":{"targetId":"A1"}})";
  switch (script.ws) {
    case Script::Ws::kResult:
      ws.write(asio::buffer(std::string(R"({"id":1,"result":{}})")), ec);
      break;
    case Script::Ws::kError:
      ws.write(asio::buffer(std::string(R"({"id":1,"error":{"code":-32000,"message":"no"}})")),
               ec);
      break;
    case Script::Ws::kCloseFrame:
      ws.close(websocket::close_code::going_away, ec);  // Chromium going, without an answer
      break;
    case Script::Ws::kEventThenResult:
      ws.write(asio::buffer(event), ec);
      if (!ec) ws.write(asio::buffer(std::string(R"({"id":2,"result":{}})")), ec);
      if (!ec) ws.write(asio::buffer(std::string(R"({"id":1,"result":{}})")), ec);
      break;
    case Script::Ws::kEventsOnly:
      for (int i = 0; i < 64 && !ec; ++i) ws.write(asio::buffer(event), ec);
      break;
    default:  // kDrop: the stream just ends
      break;
  }
  ShutDown(ws.next_layer());
}

void SetTimeouts(int fd) {
  timeval tv{5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

struct Outcome {
  Status status;
  Seen seen;
};

Outcome RunAgainst(const Script& script) {
  int h[2], w[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, h) != 0) {
    ADD_FAILURE() << "socketpair";
    return {Error(ErrorCode::kIo, "socketpair"), {}};
  }
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, w) != 0) {
    ADD_FAILURE() << "socketpair";
    close(h[0]);
    close(h[1]);
    return {Error(ErrorCode::kIo, "socketpair"), {}};
  }
  for (int fd : {h[0], h[1], w[0], w[1]}) SetTimeouts(fd);
  // The watchdog's handles on the fake's sockets: shutdown(2) on a dup ends the socket for all.
  int h_keep = dup(h[1]), w_keep = dup(w[1]);
  Seen seen;
  std::thread fake([&script, &seen, hs = h[1], ws = w[1]] {
    ServeHttp(hs, script, &seen);
    ServeWs(ws, script, &seen);
  });
  std::future<Status> closed =
      std::async(std::launch::async, [hc = h[0], wc = w[0]] { return CloseChromiumOverDevTools(hc, wc); });
  if (closed.wait_for(std::chrono::seconds(10)) != std::future_status::ready) {
    ADD_FAILURE() << "CloseChromiumOverDevTools did not return within 10 s";
    shutdown(h_keep, SHUT_RDWR);
    shutdown(w_keep, SHUT_RDWR);
  }
  Status status = closed.get();
  fake.join();
  close(h_keep);
  close(w_keep);
  return {status, seen};
}

// Nothing reached the WebSocket stream: the client stopped before the handshake.
void ExpectNoHandshake(const Seen& seen) {
  EXPECT_EQ(seen.ws_unasked_bytes, 0u) << "a WebSocket handshake was sent";
  EXPECT_EQ(seen.ws_target, "");
}

TEST(DevToolsCloseTest, HappyPathAsksVersionThenBrowserCloseOnTheAdvertisedPath) {
  Outcome o = RunAgainst(Script{});
  EXPECT_TRUE(o.status.ok()) << (o.status.ok() ? "" : o.status.error().message());
  EXPECT_EQ(o.seen.http_method, "GET");
  EXPECT_EQ(o.seen.http_target, "/json/version");
  EXPECT_EQ(o.seen.ws_target, kBrowserPath);
  nlohmann::json cmd = nlohmann::json::parse(o.seen.ws_message, nullptr, false);
  EXPECT_EQ(JsonString(cmd, "method"), "Browser.close") << o.seen.ws_message;
  EXPECT_EQ(JsonInt<int>(cmd, "id", 0), 1) << o.seen.ws_message;
}

TEST(DevToolsCloseTest, ErrorAnswerFails) {
  Script s;
  s.ws = Script::Ws::kError;
  Outcome o = RunAgainst(s);
  ASSERT_FALSE(o.status.ok());
  EXPECT_EQ(o.status.error().code(), ErrorCode::kUnavailable);
  EXPECT_EQ(o.seen.ws_target, kBrowserPath);
}

TEST(DevToolsCloseTest, WebSocketClosedWithoutAnAnswerIsOk) {
  Script s;
  s.ws = Script::Ws::kCloseFrame;
  Outcome o = RunAgainst(s);
  EXPECT_TRUE(o.status.ok()) << (o.status.ok() ? "" : o.status.error().message());
  EXPECT_NE(o.seen.ws_message.find("Browser.close"), std::string::npos);
}

TEST(DevToolsCloseTest, StreamEndedWithoutAnAnswerIsOk) {
  Script s;
  s.ws = Script::Ws::kDrop;
  Outcome o = RunAgainst(s);
  EXPECT_TRUE(o.status.ok()) << (o.status.ok() ? "" : o.status.error().message());
  EXPECT_NE(o.seen.ws_message.find("Browser.close"), std::string::npos);
}

TEST(DevToolsCloseTest, EventsAndOtherIdsBeforeTheAnswerAreSkipped) {
  Script s;
  s.ws = Script::Ws::kEventThenResult;
  Outcome o = RunAgainst(s);
  EXPECT_TRUE(o.status.ok()) << (o.status.ok() ? "" : o.status.error().message());
}

TEST(DevToolsCloseTest, SixtyFourEventsAndNoAnswerFail) {
  Script s;
  s.ws = Script::Ws::kEventsOnly;
  Outcome o = RunAgainst(s);
  ASSERT_FALSE(o.status.ok());
  EXPECT_NE(o.status.error().message().find("no answer"), std::string::npos);
}

TEST(DevToolsCloseTest, Non200VersionIsRefused) {
  Script s;
  s.status = 404;
  s.ws = Script::Ws::kNone;
  Outcome o = RunAgainst(s);
  ASSERT_FALSE(o.status.ok());
  EXPECT_NE(o.status.error().message().find("404"), std::string::npos);
  ExpectNoHandshake(o.seen);
}

// A valid answer padded to `size` bytes of JSON.
std::string PaddedBody(size_t size) {
  std::string body = VersionBody(GoodUrl());
  body.pop_back();  // the closing brace
  body += R"(,"pad":")";
  body += std::string(size - body.size() - 2, 'x') + "\"}";
  EXPECT_EQ(body.size(), size);
  return body;
}

TEST(DevToolsCloseTest, VersionBodyOf64KiBIsRead) {
  Script s;
  s.body = PaddedBody(kMaxDevToolsAnswer);
  Outcome o = RunAgainst(s);
  EXPECT_TRUE(o.status.ok()) << (o.status.ok() ? "" : o.status.error().message());
  EXPECT_EQ(o.seen.ws_target, kBrowserPath);
}

TEST(DevToolsCloseTest, VersionBodyOverSixtyFourKiBIsRefused) {
  Script s;
  s.body = PaddedBody(kMaxDevToolsAnswer + 1);
  s.ws = Script::Ws::kNone;
  Outcome o = RunAgainst(s);
  ASSERT_FALSE(o.status.ok());
  ExpectNoHandshake(o.seen);
}

TEST(DevToolsCloseTest, EndlessChunkedVersionBodyIsRefused) {
  Script s;
  s.http = Script::Http::kEndlessChunked;
  s.ws = Script::Ws::kNone;
  Outcome o = RunAgainst(s);
  ASSERT_FALSE(o.status.ok());
  ExpectNoHandshake(o.seen);
}

TEST(DevToolsCloseTest, GarbageInsteadOfHttpIsRefused) {
  Script s;
  s.http = Script::Http::kGarbage;
  s.ws = Script::Ws::kNone;
  Outcome o = RunAgainst(s);
  ASSERT_FALSE(o.status.ok());
  EXPECT_EQ(o.seen.http_target, "/json/version");
  ExpectNoHandshake(o.seen);
}

TEST(DevToolsCloseTest, PeerClosingAtOnceFails) {
  Script s;
  s.http = Script::Http::kCloseAtOnce;
  s.ws = Script::Ws::kNone;
  Outcome o = RunAgainst(s);
  ASSERT_FALSE(o.status.ok());
  ExpectNoHandshake(o.seen);
}

// webSocketDebuggerUrl values whose path is not `/devtools/browser/<letters, digits, ->`.
struct BadUrl {
  const char* name;
  std::string url;
};

void PrintTo(const BadUrl& b, std::ostream* os) { *os << '"' << b.url << '"'; }

const std::vector<BadUrl>& BadUrls() {
  static const std::vector<BadUrl> urls = {
      {"PageTarget", "ws://127.0.0.1:9222/devtools/page/x"},
      {"DotDot", "ws://127.0.0.1:9222/devtools/browser/../page/x"},
      {"IdOf200", "ws://127.0.0.1:9222/devtools/browser/" + std::string(200, 'a')},
      {"Query", "ws://127.0.0.1:9222/devtools/browser/2b7f?x=1"},
      {"Space", "ws://127.0.0.1:9222/devtools/browser/2b7f aa"},
      {"NoId", "ws://127.0.0.1:9222/devtools/browser/"},
      {"PercentEncoded", "ws://127.0.0.1:9222/devtools/browser/2b7f%2e%2e"},
      {"Prefixed", "ws://127.0.0.1:9222/x/devtools/browser/2b7f-aa"},
      {"HttpScheme", "http://127.0.0.1:9222/devtools/browser/2b7f-aa"},
      // No scheme: its first '/' starts a good path, so only the scheme check refuses it.
      {"NoScheme", "127.0.0.1:9222/devtools/browser/2b7f-aa"},
      {"NoPath", "ws://127.0.0.1:9222"},
      {"Empty", ""},
  };
  return urls;
}

class BadTargetPathTest : public testing::TestWithParam<BadUrl> {};

TEST_P(BadTargetPathTest, RefusedBeforeAnyHandshake) {
  const std::string& url = GetParam().url;
  EXPECT_FALSE(BrowserTargetPath(VersionBody(url)).ok()) << url;
  Script s;
  s.body = VersionBody(url);
  s.ws = Script::Ws::kNone;
  Outcome o = RunAgainst(s);
  ASSERT_FALSE(o.status.ok()) << url;
  EXPECT_EQ(o.status.error().code(), ErrorCode::kCorrupt) << url;
  ExpectNoHandshake(o.seen);
}

INSTANTIATE_TEST_SUITE_P(DevToolsClose, BadTargetPathTest, testing::ValuesIn(BadUrls()),
                         [](const testing::TestParamInfo<BadUrl>& p) { return p.param.name; });

TEST(BrowserTargetPathTest, TakesThePathOfABrowserTarget) {
  auto p = BrowserTargetPath(VersionBody(GoodUrl()));
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(*p, kBrowserPath);
  p = BrowserTargetPath(VersionBody("ws://localhost/devtools/browser/B0B8A4CA-1234-abcd"));
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(*p, "/devtools/browser/B0B8A4CA-1234-abcd");
  // 128 bytes of path are taken, 129 are not.
  std::string longest = "/devtools/browser/" + std::string(128 - 18, 'a');
  p = BrowserTargetPath(VersionBody("ws://h" + longest));
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(*p, longest);
  EXPECT_FALSE(BrowserTargetPath(VersionBody("ws://h" + longest + "a")).ok());
}

TEST(BrowserTargetPathTest, RefusesWhatIsNotAVersionObject) {
  for (std::string body : {std::string(""), std::string("not json"), std::string("[1,2]"),
                           std::string(R"({"webSocketDebuggerUrl":7})"),
                           std::string(R"({"Browser":"Chrome/120"})"),
                           std::string(R"("ws://h/devtools/browser/a")")}) {
    auto p = BrowserTargetPath(body);
    ASSERT_FALSE(p.ok()) << body;
    EXPECT_EQ(p.error().code(), ErrorCode::kCorrupt);
  }
  EXPECT_FALSE(BrowserTargetPath(PaddedBody(kMaxDevToolsAnswer + 1)).ok());
  EXPECT_TRUE(BrowserTargetPath(PaddedBody(kMaxDevToolsAnswer)).ok());
}

TEST(IsBrowserCloseAnswerTest, TellsTheAnswerFromEverythingElse) {
  auto a = IsBrowserCloseAnswer(R"({"id":1,"result":{}})");
  ASSERT_TRUE(a.ok());
  EXPECT_TRUE(*a);
  for (const char* other : {R"({"id":2,"result":{}})", R"({"method":"Target.detached"})",
                            R"({"id":1.0,"result":{}})", R"({"id":"1","result":{}})",
                            R"([{"id":1}])", "garbage", "", R"({"id":4294967297})"}) {
    auto r = IsBrowserCloseAnswer(other);
    ASSERT_TRUE(r.ok()) << other;
    EXPECT_FALSE(*r) << other;
  }
  auto refused = IsBrowserCloseAnswer(R"({"id":1,"error":{"code":-32000,"message":"no"}})");
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().code(), ErrorCode::kUnavailable);
  auto big = IsBrowserCloseAnswer(std::string(kMaxDevToolsAnswer + 1, ' '));
  ASSERT_FALSE(big.ok());
  EXPECT_EQ(big.error().code(), ErrorCode::kCorrupt);
}

}  // namespace
}  // namespace cloister::vm
