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

constexpr size_t kMaxDevToolsAnswer = 64 * 1024;

bool DevToolsPathIsSafe(const std::string& p) {
  const std::string prefix = "/devtools/browser/";
  if (p.size() <= prefix.size() || p.size() > 128 || p.compare(0, prefix.size(), prefix) != 0) {
    return false;
  }
  for (char c : p.substr(prefix.size())) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-') return false;
  }
  return true;
}

}  // namespace

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
  nlohmann::json version = nlohmann::json::parse(parser.get().body(), nullptr, false);
  std::string url = JsonString(version, "webSocketDebuggerUrl");
  size_t at = url.find("/devtools/");
  std::string path = at == std::string::npos ? "" : url.substr(at);
  if (!DevToolsPathIsSafe(path)) {
    return Error(ErrorCode::kCorrupt, "devtools /json/version names no browser target");
  }
  // 2. Browser.close; Chromium answers, then closes the WebSocket as it shuts down.
  websocket::stream<Local::socket> ws(std::move(ws_sock));
  ws.read_message_max(kMaxDevToolsAnswer);
  ws.handshake("127.0.0.1:9222", path, ec);
  if (ec) return Error(ErrorCode::kUnavailable, "devtools WebSocket: " + ec.message());
  const std::string close_cmd = R"({"id":1,"method":"Browser.close"})";
  ws.write(asio::buffer(close_cmd), ec);
  if (ec) return Error(ErrorCode::kUnavailable, "devtools Browser.close: " + ec.message());
  for (int i = 0; i < 64; ++i) {
    beast::flat_buffer msg;
    ws.read(msg, ec);
    if (ec) return OkStatus();  // closed: Chromium is going
    nlohmann::json answer =
        nlohmann::json::parse(beast::buffers_to_string(msg.data()), nullptr, false);
    if (JsonInt<int>(answer, "id", 0) == 1) {
      if (answer.is_object() && answer.contains("error")) {
        return Error(ErrorCode::kUnavailable, "devtools Browser.close refused");
      }
      return OkStatus();
    }
  }
  return Error(ErrorCode::kUnavailable, "devtools: no answer to Browser.close");
}

}  // namespace cloister::vm
