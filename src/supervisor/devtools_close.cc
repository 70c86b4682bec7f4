#include "supervisor/devtools_close.h"

#include <unistd.h>

#include <cctype>
#include <string>

#include <boost/asio/io_context.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/beast/core/buffers_to_string.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/websocket.hpp>
#include <nlohmann/json.hpp>

#include "base/json_util.h"

namespace cloister::vm {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;  // NOLINT
namespace http = beast::http;
namespace websocket = beast::websocket;
using Local = asio::local::stream_protocol;

// Only what Chromium's browser target ever is (`/devtools/browser/<uuid>`): no `..`, `?`, `%`,
// space or second target kind reaches the handshake's request line.
bool DevToolsBrowserPathIsSafe(std::string_view p) {
  constexpr std::string_view kPrefix = "/devtools/browser/";
  if (p.size() <= kPrefix.size() || p.size() > 128 || p.substr(0, kPrefix.size()) != kPrefix) {
    return false;
  }
  for (char c : p.substr(kPrefix.size())) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-') return false;
  }
  return true;
}

}  // namespace

Result<std::string> BrowserTargetPath(std::string_view json_version_body) {
  const Error none(ErrorCode::kCorrupt, "devtools /json/version names no browser target");
  if (json_version_body.size() > kMaxDevToolsAnswer) return none;
  nlohmann::json version = nlohmann::json::parse(json_version_body, nullptr, false);
  std::string url = JsonString(version, "webSocketDebuggerUrl");
  // The path starts at the first '/' after the scheme: one inside a longer path (the former
  // `find("/devtools/")`) would let the guest prefix anything to it.
  constexpr std::string_view kScheme = "ws://";
  if (url.compare(0, kScheme.size(), kScheme) != 0) return none;
  size_t slash = url.find('/', kScheme.size());
  if (slash == std::string::npos) return none;
  std::string path = url.substr(slash);
  if (!DevToolsBrowserPathIsSafe(path)) return none;
  return path;
}

Result<bool> IsBrowserCloseAnswer(std::string_view ws_message) {
  if (ws_message.size() > kMaxDevToolsAnswer) {
    return Error(ErrorCode::kCorrupt, "devtools: a WebSocket message over 64 KiB");
  }
  nlohmann::json answer = nlohmann::json::parse(ws_message, nullptr, false);
  if (JsonInt<int>(answer, "id", 0) != 1) return false;  // an event, or not JSON: not the answer
  if (answer.contains("error")) {
    return Error(ErrorCode::kUnavailable, "devtools Browser.close refused");
  }
  return true;
}

Status CloseChromiumOverDevTools(int http_fd, int ws_fd) {
  asio::io_context io;
  Local::socket hs(io), ws_sock(io);
  boost::system::error_code ec;
  hs.assign(Local(), http_fd, ec);
  if (ec) {
    close(http_fd);
    close(ws_fd);
    return Error(ErrorCode::kIo, "devtools: " + ec.message());
  }
  ws_sock.assign(Local(), ws_fd, ec);
  if (ec) {
    close(ws_fd);
    return Error(ErrorCode::kIo, "devtools: " + ec.message());
  }
  // 1. The browser target's WebSocket path.
  http::request<http::empty_body> req{http::verb::get, "/json/version", 11};
  req.set(http::field::host, "127.0.0.1");
  http::write(hs, req, ec);
  beast::flat_buffer buf(kMaxDevToolsAnswer);
  http::response_parser<http::string_body> parser;
  parser.header_limit(8 * 1024);
  parser.body_limit(kMaxDevToolsAnswer);
  if (!ec) http::read(hs, buf, parser, ec);
  if (ec) return Error(ErrorCode::kUnavailable, "devtools /json/version: " + ec.message());
  if (parser.get().result_int() != 200) {
    return Error(ErrorCode::kUnavailable,
                 "devtools /json/version answered " + std::to_string(parser.get().result_int()));
  }
  ASSIGN_OR_RETURN(std::string path, BrowserTargetPath(parser.get().body()));
  // 2. Browser.close; Chromium answers, then closes the WebSocket as it shuts down.
  websocket::stream<Local::socket> ws(std::move(ws_sock));
  ws.read_message_max(kMaxDevToolsAnswer);
  ws.handshake("127.0.0.1:9222", path, ec);
  if (ec) return Error(ErrorCode::kUnavailable, "devtools WebSocket: " + ec.message());
  const std::string close_cmd = R"({"id":1,"method":"Browser.close"})";
  ws.write(asio::buffer(close_cmd), ec);
  if (ec) return Error(ErrorCode::kUnavailable, "devtools Browser.close: " + ec.message());
  // Events Chromium sends before its answer are skipped, a bounded number of them.
  for (int i = 0; i < 64; ++i) {
    beast::flat_buffer msg;
    ws.read(msg, ec);
    if (ec) return OkStatus();  // closed: Chromium is going
    ASSIGN_OR_RETURN(bool answered, IsBrowserCloseAnswer(beast::buffers_to_string(msg.data())));
    if (answered) return OkStatus();
  }
  return Error(ErrorCode::kUnavailable, "devtools: no answer to Browser.close");
}

}  // namespace cloister::vm
