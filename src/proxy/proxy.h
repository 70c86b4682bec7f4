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
//   - the CONNECT authority, the TLS SNI (when sent) and the Host header must name one host (an
//     absolute-form request: its target's host and Host), else 421;
//   - in request headers, placeholders are replaced by real values for credentials whose scope
//     holds the host, only when the TLS SNI, the CONNECT authority and the Host header agree;
//     bodies only for credentials that opted in;
//   - every request's target, headers and body (streamed) are scanned for all placeholders of the
//     workspace; one going to a host outside its scope gets HTTP 451, is not forwarded, and the
//     compromise callback runs; after that every request, CONNECT, tunnel and transparent stream
//     gets 451 (fail closed);
//   - bodies stream both ways (chunked, SSE, large transfers, keep-alive; WebSocket after a 101 is
//     passed through unscanned). Request bodies up to body_hold_bytes are held and scanned before
//     the request goes upstream, so a blocked request sends nothing; longer bodies stream with a
//     hold-back of the longest placeholder in any form the detector knows, and on detection the
//     upstream connection is reset before the placeholder's bytes are written.
//   - responses to a request that carried a real value come back in identity encoding (else 502)
//     with the real values redacted in every known form (redactor.h);
//   - one trace record per request (trace.h), also for a request that ends without a whole
//     response (the client gone, its stream reset or the channel closed, the upstream refusing,
//     timing out or closing, the proxy stopping), with the reason and the phases it reached; an
//     upstream silent beyond a bound is answered 504 (ProxyConfig::upstream_idle_ms);
//   - a request whose reused upstream connection fails before any byte of an answer (the
//     upstream closed it while idle) is sent again once on a new connection, when that is safe
//     (an idempotent method and a body the proxy still holds), else answered 502.
// Each request runs through the filter chain (chain.h; the order is in chain.cc); the files that
// implement this class are listed in proxy_impl.h.
//   - the workspace's egress policy (policy.h) decides which host:port may be reached at all:
//     a CONNECT or absolute-form request elsewhere gets 403 and a trace record with the reason.
//
// Transparent mode (ServeTransparent, the "egress" channel service): the guest agent redirects
// every outbound TCP connection and starts the stream with one header line "<host> <port>\n"
// (transparent.h). The proxy checks the egress policy (refusal: the stream is closed, and
// traced), then looks at the client's first bytes:
//   - a TLS ClientHello (any port): intercepted exactly as after a CONNECT to host:port; an SNI
//     other than the header's name is refused (closed, traced);
//   - an HTTP request line: proxied as if absolute-form to http://host:port, the Host header must
//     name the header's host (else 421);
//   - anything else, or nothing within transparent_sniff_ms (server-speaks-first protocols):
//     spliced unread to host:port only where an opaque tunnel is allowed (an egress entry naming
//     that port, or the SSH policy's tunnel ports and hosts; never 80/443), else closed and traced.
// Both modes share this instance: one substitution map, one compromise detector, one trace.
// Neither mode connects to a loopback, link-local, multicast or unspecified address that DNS
// returned (the host's own services and cloud metadata stay out of reach); resolve overrides
// (tests) are exempt.
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
#include "proxy/extension_filter.h"
#include "proxy/policy.h"
#include "proxy/trace.h"
#include "vault/vault.h"

namespace cloister::proxy {

class ConsentGate;  // consent_filter.h

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
  // Tests: the DNS servers to ask ("ip:port,ip:port") instead of the host's resolv.conf (names are
  // resolved asynchronously, cached for their TTL: resolver.h). Never set by default.
  std::string dns_servers;
  std::string upstream_ca_file;  // PEM bundle to verify upstreams; empty: the system trust store
  std::shared_ptr<TraceSink> trace;  // may be null
  std::function<void(const CompromiseEvent&)> on_compromise;
  int threads = 2;
  size_t body_hold_bytes = 1 << 20;
  // Ask-before-use consent (consent_filter.h): who decides whether a credential with an ask
  // policy may be used. Null: every use of such a credential is refused (fail closed).
  std::shared_ptr<ConsentGate> consent;
  // Filters other modules plug into the chain (aws/ re-signing and custody, oauth/ logins), in
  // order. See extension_filter.h.
  std::vector<std::shared_ptr<ExtensionFilter>> extension_filters;
  // Opaque CONNECT tunnels: a CONNECT to a port listed here toward a host in `tunnel_hosts`
  // (exact or subdomain, as credential scopes) is spliced byte for byte to the upstream, neither
  // intercepted nor scanned (SSH on port 22 for git and ssh; see docs/threat-model.md). Any other
  // CONNECT must carry TLS. Empty (the default): no opaque tunnels.
  std::vector<uint16_t> tunnel_ports;
  std::vector<std::string> tunnel_hosts;
  // Which host:port the guest may reach (both modes); the default allows all.
  EgressPolicy egress_policy;
  // Transparent mode: how long to wait for the client's first bytes when an opaque tunnel to the
  // destination is allowed (silence then means a server-speaks-first protocol, and the bytes are
  // spliced); without an opaque tunnel the proxy waits up to transparent_idle_ms, then closes.
  // The header itself must arrive within transparent_idle_ms.
  int transparent_sniff_ms = 1000;
  int transparent_idle_ms = 30000;
  // Bounds on the upstream (0: none): a TCP connect (and TLS handshake) must end within
  // upstream_connect_ms; after the request is sent, the response head, and then each piece of its
  // body, must come within upstream_idle_ms. Past either the client gets 504 with the reason (a
  // response already started is cut) and the trace record says upstream_timeout. The idle bound
  // is above the clients' own (npm's fetch timeout is 5 minutes, an LLM SDK's request 10).
  int upstream_connect_ms = 30000;
  int upstream_idle_ms = 11 * 60 * 1000;
};

// Why a client connection ended, when the socket cannot say: a channel stream the guest reset, or
// the channel itself closing (channel/mux.h StreamEnd). Returns a kAbort* code of trace.h, or ""
// when nothing is known (an ordinary close). Called on a proxy thread after a read or write on
// the connection failed.
using ClientEndReason = std::function<std::string()>;

class Proxy {
 public:
  static Result<std::unique_ptr<Proxy>> Start(ProxyConfig config);
  ~Proxy();

  // Takes ownership of a connected stream socket (unix or TCP) and serves it until it closes.
  void Serve(int fd);
  // Same, for a transparent-mode stream: the header line "<host> <port>\n", then the client's
  // raw bytes (see the top of this file and transparent.h).
  void ServeTransparent(int fd);
  // The same two for a stream of another VM of the workspace (its browser VM): every trace record
  // of the connection carries `source` (trace.h). Same policy, placeholders and detector.
  void Serve(int fd, const std::string& source);
  void ServeTransparent(int fd, const std::string& source);
  // The same, for a stream that can say why it ended (the supervisor's channel streams).
  void Serve(int fd, const std::string& source, ClientEndReason why_ended);
  void ServeTransparent(int fd, const std::string& source, ClientEndReason why_ended);
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
