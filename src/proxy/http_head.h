// Request-head rules of the proxy: what a guest may send, and how targets and hosts are read.
//
// SECURITY: everything here parses hostile guest bytes (through Boost.Beast's parser, then our own
// stricter checks). A request that fails any rule is answered with 400 and the connection is
// closed; it is never forwarded. Rules (on top of Beast's RFC 9112 parsing):
//   - header block at most kMaxHeaderBytes, at most kMaxHeaderCount fields, target at most
//     kMaxTargetBytes; HTTP/1.0 or HTTP/1.1 only;
//   - Transfer-Encoding only as exactly one "chunked", never together with Content-Length
//     (request smuggling); at most one Content-Length, plain digits;
//   - exactly one Host on HTTP/1.1, a valid authority; CONNECT only with host:port;
//   - header names are tokens, values have no control characters (Beast), chunk sizes are hex
//     without overflow (Beast).
// The fuzz target fuzz/http_request_fuzz.cc drives ParseRequestBytes().
#pragma once

#include <boost/beast/http/message.hpp>
#include <cstdint>
#include <string>
#include <string_view>

#include "base/result.h"

namespace cloister::proxy {

inline constexpr size_t kMaxHeaderBytes = 64 * 1024;
inline constexpr size_t kMaxHeaderCount = 128;
inline constexpr size_t kMaxTargetBytes = 16 * 1024;

struct Authority {
  std::string host;  // lower-case, no trailing dot, IPv6 without brackets
  uint16_t port = 0;
  std::string HostPort() const;  // "host:port" ([v6]:port)
};

// "host", "host:port", "[v6]:port". Without a port, `default_port` (0 = port required).
Result<Authority> ParseAuthority(std::string_view text, uint16_t default_port);

struct RequestTarget {
  enum class Form { kOrigin, kAbsolute, kAuthority, kAsterisk };
  Form form = Form::kOrigin;
  std::string scheme;    // "http"/"https" for kAbsolute
  Authority authority;   // kAbsolute and kAuthority
  std::string path;      // origin-form path+query ("/" when empty); empty for kAuthority
};

Result<RequestTarget> ParseTarget(std::string_view method, std::string_view target);

// Checks a parsed request head against the rules above.
Status ValidateRequestHead(const boost::beast::http::request_header<>& head);

// Feeds `bytes` (a request head, optionally followed by a body) to the parser configured as the
// proxy configures it, validates the head, then consumes the body. Returns the first error.
// Used by the fuzz target and the tests; `body_bytes` (optional) receives the decoded body size.
Status ParseRequestBytes(std::string_view bytes, size_t* body_bytes = nullptr);

}  // namespace cloister::proxy
