// Fuzz target: the proxy's filter chain (proxy/chain.h) over a guest request: the head as the
// proxy parses and validates it, then every filter's request hooks (destination, detection, name
// agreement, substitution, hop-by-hop, body swap, identity, redaction) with the body in uneven
// pieces, then the response hooks over the same bytes as an upstream's answer.
// SECURITY: the request is guest bytes; the filters must answer any of it with a status, never
// crash or read out of bounds.
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "proxy/chain.h"
#include "proxy/http_head.h"
#include "vault/placeholder.h"

namespace {

namespace http = boost::beast::http;
using namespace cloister;

struct Setup {
  Setup() {
    auto add = [&](vault::CredentialKind kind, const std::string& real, bool body) {
      auto c = vault::MakeCredential(kind, real, {}, kind == vault::CredentialKind::kHeader ? "X-Key" : "",
                                     body);
      if (!c.ok()) return;
      if (kind == vault::CredentialKind::kHeader) c->hosts = {"a.test"};
      auto ph = vault::MakePlaceholder(std::string(32, 'S'), "ws", *c);
      if (ph.ok()) config.credentials.push_back({*c, *ph});
    };
    add(vault::CredentialKind::kAnthropic, "sk-ant-api03-REALxANTHROPICx0123456789abcdefghijklmnopqrstuvwxyzAA", false);
    add(vault::CredentialKind::kGithub, "ghp_REALGITHUBSECRET0123456789abcdefgh", false);
    add(vault::CredentialKind::kHeader, "refresh-REAL-0123456789-abcdefghijklmnop", true);
    std::vector<std::string> phs;
    for (const auto& b : config.credentials) phs.push_back(b.placeholder);
    set = std::make_unique<proxy::PlaceholderSet>(phs);
    ctx.config = &config;
    ctx.placeholders = set.get();
    ctx.tripped = &tripped;
  }
  proxy::ProxyConfig config;
  std::unique_ptr<proxy::PlaceholderSet> set;
  std::atomic<bool> tripped{false};
  proxy::ProxyContext ctx;
  proxy::Chain chain = proxy::DefaultChain();
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Setup* s = new Setup();
  if (size < 1) return 0;
  // First byte: which connection the request arrived on.
  proxy::Origin origin;
  uint8_t mode = data[0] % 3;
  origin.tls = mode != 0;
  origin.transparent = mode == 2;
  origin.connect = {(data[0] & 4) ? "api.anthropic.com" : "a.test", 443};
  origin.sni = (data[0] & 8) ? "" : origin.connect.host;
  std::string_view bytes(reinterpret_cast<const char*>(data + 1), size - 1);

  http::request_parser<http::string_body> parser;
  parser.header_limit(proxy::kMaxHeaderBytes);
  parser.body_limit(1 << 20);
  boost::beast::error_code ec;
  parser.put(boost::asio::buffer(bytes.data(), bytes.size()), ec);
  if (ec || !parser.is_header_done()) return 0;
  auto& req = parser.get();
  if (!proxy::ValidateRequestHead(req).ok()) return 0;

  proxy::Exchange ex(s->ctx, origin, req);
  ex.rec.method = std::string(req.method_string());
  ex.raw_target = std::string(req.target());
  ex.hold_limit = 1 << 20;
  if (!s->chain.OnRequestHead(ex).ok()) return 0;
  ex.body_whole = (data[0] & 16) != 0;
  std::string body = req.body();
  if (ex.body_whole) {
    if (!s->chain.OnRequestBody(ex, body, true).ok()) return 0;
  } else {
    size_t off = 0, step = 1;
    do {
      size_t n = std::min(step, body.size() - off);
      std::string piece = body.substr(off, n);
      off += n;
      if (!s->chain.OnRequestBody(ex, piece, off >= body.size()).ok()) return 0;
      step = step * 5 % 89 + 1;
    } while (off < body.size());
  }
  // The same bytes as an upstream's answer (an echo of the request).
  http::response<http::empty_body> res{http::status::ok, 11};
  res.set(http::field::content_encoding, (data[0] & 32) ? "gzip" : "identity");
  res.set("X-Echo", std::string(bytes.substr(0, 200)));
  if (!s->chain.OnResponseHead(ex, res).ok()) return 0;
  std::string echo(bytes);
  (void)s->chain.OnResponseBody(ex, res, echo, true);
  return 0;
}
