#include "proxy/http_head.h"

#include <arpa/inet.h>

#include <boost/beast/http/buffer_body.hpp>
#include <boost/beast/http/parser.hpp>

#include "base/strings.h"

namespace cloister::proxy {
namespace http = boost::beast::http;
namespace {

Error Bad(const std::string& why) { return Error(ErrorCode::kInvalidArgument, why); }

bool ValidHostChars(std::string_view h) {
  for (char c : h) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '.' || c == '_')) {
      return false;
    }
  }
  return true;
}

}  // namespace

std::string Authority::HostPort() const {
  bool v6 = host.find(':') != std::string::npos;
  return (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

Result<Authority> ParseAuthority(std::string_view text, uint16_t default_port) {
  if (text.empty() || text.size() > 300) return Bad("bad authority");
  Authority a;
  std::string_view host, port;
  bool has_port = false;
  if (text.front() == '[') {
    size_t close = text.find(']');
    if (close == std::string_view::npos) return Bad("bad IPv6 authority");
    host = text.substr(1, close - 1);
    std::string_view rest = text.substr(close + 1);
    if (!rest.empty()) {
      if (rest.front() != ':') return Bad("bad authority");
      port = rest.substr(1);
      has_port = true;
    }
    unsigned char buf[16];
    if (inet_pton(AF_INET6, std::string(host).c_str(), buf) != 1) return Bad("bad IPv6 address");
    a.host = ToLower(host);
  } else {
    size_t colon = text.rfind(':');
    if (colon != std::string_view::npos) {
      host = text.substr(0, colon);
      port = text.substr(colon + 1);
      has_port = true;
    } else {
      host = text;
    }
    std::string h = ToLower(host);
    if (!h.empty() && h.back() == '.') h.pop_back();
    if (h.empty() || h.size() > 253 || !ValidHostChars(h) || h.front() == '.' ||
        h.find("..") != std::string::npos) {
      return Bad("bad host name");
    }
    a.host = h;
  }
  if (port.empty()) {
    if (default_port == 0 || has_port) return Bad("port required");
    a.port = default_port;
  } else {
    if (port.size() > 5) return Bad("bad port");
    unsigned v = 0;
    for (char c : port) {
      if (c < '0' || c > '9') return Bad("bad port");
      v = v * 10 + static_cast<unsigned>(c - '0');
    }
    if (v == 0 || v > 65535) return Bad("bad port");
    a.port = static_cast<uint16_t>(v);
  }
  return a;
}

Result<RequestTarget> ParseTarget(std::string_view method, std::string_view target) {
  RequestTarget t;
  if (target.empty() || target.size() > kMaxTargetBytes) return Bad("bad request target");
  if (method == "CONNECT") {
    t.form = RequestTarget::Form::kAuthority;
    ASSIGN_OR_RETURN(t.authority, ParseAuthority(target, 0));
    return t;
  }
  if (target == "*") {
    if (method != "OPTIONS") return Bad("'*' target only with OPTIONS");
    t.form = RequestTarget::Form::kAsterisk;
    return t;
  }
  if (target.front() == '/') {
    t.form = RequestTarget::Form::kOrigin;
    t.path = std::string(target);
    return t;
  }
  size_t sep = target.find("://");
  if (sep == std::string_view::npos) return Bad("bad request target");
  t.form = RequestTarget::Form::kAbsolute;
  t.scheme = ToLower(target.substr(0, sep));
  uint16_t def = t.scheme == "http" ? 80 : t.scheme == "https" ? 443 : 0;
  if (def == 0) return Bad("unsupported scheme");
  std::string_view rest = target.substr(sep + 3);
  size_t slash = rest.find_first_of("/?#");
  std::string_view auth = rest.substr(0, slash);
  if (auth.find('@') != std::string_view::npos) return Bad("userinfo in request target");
  ASSIGN_OR_RETURN(t.authority, ParseAuthority(auth, def));
  t.path = slash == std::string_view::npos ? "/" : std::string(rest.substr(slash));
  if (t.path.front() != '/') t.path = "/" + t.path;
  size_t hash = t.path.find('#');
  if (hash != std::string::npos) t.path.resize(hash);
  return t;
}

Status ValidateRequestHead(const http::request_header<>& head) {
  if (head.version() != 11 && head.version() != 10) return Bad("unsupported HTTP version");
  size_t count = 0, host_count = 0, cl_count = 0, te_count = 0;
  std::string te;
  for (const auto& f : head) {
    if (++count > kMaxHeaderCount) return Bad("too many header fields");
    if (f.name_string().empty()) return Bad("empty header name");
    for (char c : f.value()) {
      if (static_cast<unsigned char>(c) < 0x20 && c != '\t') return Bad("control character in header");
      if (c == 0x7f) return Bad("control character in header");
    }
    switch (f.name()) {
      case http::field::host: ++host_count; break;
      case http::field::content_length: {
        ++cl_count;
        std::string_view v(f.value().data(), f.value().size());
        if (v.empty() || v.size() > 15) return Bad("bad Content-Length");
        for (char c : v) {
          if (c < '0' || c > '9') return Bad("bad Content-Length");
        }
        break;
      }
      case http::field::transfer_encoding:
        ++te_count;
        te = ToLower(Trim(std::string_view(f.value().data(), f.value().size())));
        break;
      default: break;
    }
  }
  if (te_count > 1 || (te_count == 1 && te != "chunked")) return Bad("unsupported Transfer-Encoding");
  if (te_count && cl_count) return Bad("both Content-Length and Transfer-Encoding");
  if (cl_count > 1) return Bad("more than one Content-Length");
  if (host_count > 1) return Bad("more than one Host");
  if (head.version() == 11 && host_count == 0) return Bad("missing Host");
  std::string_view method(head.method_string().data(), head.method_string().size());
  std::string_view target(head.target().data(), head.target().size());
  if (method.empty()) return Bad("empty method");
  ASSIGN_OR_RETURN(RequestTarget t, ParseTarget(method, target));
  if (host_count == 1) {
    auto h = head[http::field::host];
    uint16_t def = t.form == RequestTarget::Form::kAuthority ? t.authority.port : 80;
    if (!ParseAuthority(std::string_view(h.data(), h.size()), def).ok()) return Bad("bad Host");
  }
  return OkStatus();
}

Status ParseRequestBytes(std::string_view bytes, size_t* body_bytes) {
  http::request_parser<http::buffer_body> parser;
  parser.header_limit(kMaxHeaderBytes);
  parser.body_limit(boost::none);
  parser.eager(false);
  boost::system::error_code ec;
  size_t off = 0;
  while (!parser.is_header_done()) {
    if (off >= bytes.size()) return Bad("incomplete request head");
    size_t n = parser.put(boost::asio::buffer(bytes.data() + off, bytes.size() - off), ec);
    if (ec == http::error::need_more) return Bad("incomplete request head");
    if (ec) return Bad("malformed request: " + ec.message());
    off += n;
    if (n == 0) return Bad("incomplete request head");
  }
  RETURN_IF_ERROR(ValidateRequestHead(parser.get()));
  size_t total = 0;
  char scratch[4096];
  while (!parser.is_done()) {
    parser.get().body().data = scratch;
    parser.get().body().size = sizeof scratch;
    size_t n = parser.put(boost::asio::buffer(bytes.data() + off, bytes.size() - off), ec);
    if (ec == http::error::need_buffer) ec = {};
    size_t produced = sizeof scratch - parser.get().body().size;
    total += produced;
    if (ec == http::error::need_more) break;  // incomplete body: fine for a head check
    if (ec) return Bad("malformed body: " + ec.message());
    off += n;
    if (n == 0 && produced == 0) break;
  }
  if (body_bytes) *body_bytes = total;
  return OkStatus();
}

}  // namespace cloister::proxy
