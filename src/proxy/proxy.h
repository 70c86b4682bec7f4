// The egress proxy: the only way out of a workspace's VM.
//
// Runs inside the per-workspace supervisor. The guest reaches it through a channel stream; the
// supervisor hands the proxy one connected socket fd per guest connection (Serve). Tests and the
// bench use ListenLoopback() on 127.0.0.1:0 instead.
//
// What it does with each connection (HTTP/1.1):
//   - plain requests in absolute form (http://host/...) are forwarded without substitution (a real
//     credential never travels in clear text);
//   - CONNECT host:port is answered 200, then the client's TLS is terminated with a leaf
//     certificate for the SNI name minted by the per-install CA, and every request inside is
//     forwarded over a new TLS connection to host:port, verified against the upstream trust store,
//     ALPN http/1.1 both ways. A tunnel whose first byte is not a TLS handshake is closed (no
//     opaque tunnels: they would bypass the detector);
//   - in request headers, placeholders are replaced by real values for credentials whose scope
//     holds the host, only when the TLS SNI, the CONNECT authority and the Host header agree;
//     bodies only for credentials that opted in;
//   - every request's target, headers and body (streamed) are scanned for all placeholders of the
//     workspace; one going to a host outside its scope gets HTTP 451, is not forwarded, and the
//     compromise callback runs; after that every request gets 451 (fail closed);
//   - bodies stream both ways (chunked, SSE, large transfers, keep-alive; WebSocket after a 101 is
//     passed through unscanned). Request bodies up to body_hold_bytes are held and scanned before
//     the request goes upstream, so a blocked request sends nothing; longer bodies stream with a
//     hold-back of one placeholder length, and on detection the upstream connection is reset
//     before the placeholder's bytes are written.
//   - one trace record per request (trace.h).
//
// Threading: Start() runs `threads` single-threaded event loops; each connection lives on one of
// them (round robin), so its handlers never hop between threads.
// Serve() and Stop() may be called from any thread. The compromise callback runs on a proxy thread
// and must not block for long (it marks the store and pauses the VM over QMP).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"
#include "proxy/ca.h"
#include "proxy/filter.h"
#include "proxy/trace.h"
#include "vault/vault.h"

namespace cloister::proxy {

struct CompromiseEvent {
  std::string workspace;
  std::string credential;  // credential id whose placeholder was caught
  std::string host;        // where it was going
  std::string where;       // "url", "header:<name>", "body"
  std::string encoding;    // raw, url, base64
};

struct ProxyConfig {
  std::string workspace;
  // SECURITY: real values, in memory only. The proxy keeps its own copy.
  std::vector<vault::BoundCredential> credentials;
  vault::LlmBodyPolicy llm_body_policy = vault::LlmBodyPolicy::kFlag;
  std::shared_ptr<CertAuthority> ca;  // required
  // "host:port" -> "ip:port". Tests map real names to local fakes. Never set by default.
  std::map<std::string, std::string> resolve;
  // When true, a host missing from `resolve` is refused (502) instead of looked up in DNS: tests
  // set it so nothing can ever leave loopback.
  bool resolve_only = false;
  std::string upstream_ca_file;  // PEM bundle to verify upstreams; empty: the system trust store
  std::shared_ptr<TraceSink> trace;  // may be null
  std::function<void(const CompromiseEvent&)> on_compromise;
  int threads = 2;
  size_t body_hold_bytes = 1 << 20;
  // Request filters (aws re-signing), in order. See filter.h.
  std::vector<std::shared_ptr<RequestFilter>> filters;
  // Opaque CONNECT tunnels: a CONNECT to a port listed here toward a host in `tunnel_hosts`
  // (exact or subdomain, as credential scopes) is spliced byte for byte to the upstream, neither
  // intercepted nor scanned (SSH on port 22 for git and ssh; see docs/threat-model.md). Any other
  // CONNECT must carry TLS. Empty (the default): no opaque tunnels.
  std::vector<uint16_t> tunnel_ports;
  std::vector<std::string> tunnel_hosts;
};

class Proxy {
 public:
  static Result<std::unique_ptr<Proxy>> Start(ProxyConfig config);
  ~Proxy();

  // Takes ownership of a connected stream socket (unix or TCP) and serves it until it closes.
  void Serve(int fd);
  // Listens on 127.0.0.1:0 and serves every accepted connection; returns the port.
  Result<uint16_t> ListenLoopback();
  // Closes every connection and joins the threads. Idempotent.
  void Stop();

  // True once a placeholder was caught going out of scope.
  bool compromised() const;

  class Impl;

 private:
  explicit Proxy(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Header substitution: `value` with every occurrence of `placeholder` replaced by `real`, also
// inside "Basic base64(user:password)". nullopt when the placeholder is not there.
std::optional<std::string> SubstituteInHeader(std::string_view value, std::string_view placeholder,
                                              std::string_view real);

}  // namespace cloister::proxy
