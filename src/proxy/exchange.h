// One proxied request as the filter chain sees it (chain.h), and what every filter of one proxy
// shares. Owned by the HTTP driver (http_driver.cc) for the lifetime of one request/response.
//
// The filters are plain synchronous code: they read and rewrite the Beast request head, set the
// fields below, and refuse with Exchange::Refuse (an HTTP status the driver writes) or by adding
// an out-of-scope hit to `block` (the driver answers 451 and trips the compromise detector).
#pragma once

#include <atomic>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/fields.hpp>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "base/result.h"
#include "proxy/detector.h"
#include "proxy/extension_filter.h"
#include "proxy/http_head.h"
#include "proxy/proxy.h"
#include "proxy/redactor.h"
#include "proxy/trace.h"
#include "vault/crypto.h"

namespace cloister::proxy {

class ConsentTicket;  // consent_filter.h

// The client connection's view of where requests go.
struct Origin {
  bool tls = false;
  // Transparent mode: `connect` is the header's host:port, for plain HTTP too (the request's Host
  // must name it), and a TLS SNI must name it as well.
  bool transparent = false;
  Authority connect;  // CONNECT authority (tls or transparent)
  std::string sni;    // client's SNI, lower-case, "" if none (tls only)
  std::string source;  // the trace records' source: "" (the workspace) or "browser"
  ClientEndReason end_reason;  // may be empty (proxy.h)

  // Why this client went away, for a trace record: what the stream knows, else client_gone.
  std::string ClientAbort() const {
    std::string why = end_reason ? end_reason() : "";
    return why.empty() ? kAbortClientGone : why;
  }
};

// Read-only state of one proxy that filters use. Lives as long as the proxy.
struct ProxyContext {
  const ProxyConfig* config = nullptr;
  const PlaceholderSet* placeholders = nullptr;
  const std::atomic<bool>* tripped = nullptr;  // the compromise detector has tripped
  // Streaming request bodies keep at least this many bytes back until the next piece was scanned
  // (the longest span a placeholder can take in any encoding the detector knows).
  size_t stream_hold_bytes = 256;
  // True when `host` receives LLM conversations (the LLM body policy applies to it).
  bool IsLlmHost(const std::string& host) const;
};

using RequestHeader = boost::beast::http::request_header<>;
using ResponseHeader = boost::beast::http::response_header<>;

struct Exchange {
  Exchange(const ProxyContext& c, const Origin& o, RequestHeader& r) : ctx(c), origin(o), req(r) {}
  ~Exchange() { vault::SecureWipe(swap_carry); }
  Exchange(const Exchange&) = delete;
  Exchange& operator=(const Exchange&) = delete;

  const ProxyContext& ctx;
  const Origin& origin;
  RequestHeader& req;  // the request head as it will go upstream (filters rewrite it)

  // The trace record of this request (the driver writes it once).
  TraceRecord rec;
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();

  std::string raw_target;  // the request target as the client sent it (scanned as is)

  // Destination (DestinationFilter).
  Authority target;                // where the request goes
  std::string host_header;         // the Host header's host ("" if unparsable)
  std::vector<std::string> hosts;  // every name the request claims: target, Host, SNI
  bool names_agree = false;        // TLS: SNI == CONNECT host == Host header
  std::vector<size_t> in_scope;    // credentials whose scope holds every name

  // Detection: out-of-scope placeholder hits; non-empty means 451 and a trip.
  std::vector<LeakFlag> block;
  std::unique_ptr<StreamScanner> scanner;  // the body's scanner (DetectionFilter)

  // Substitution (header and body): real values that went out, redacted in the response.
  Redactor redactor;
  std::vector<size_t> body_subst;  // credentials swapped inside the body
  std::string swap_carry;          // streaming: a tail that may be the start of a placeholder
  bool swap_streaming = false;

  // Hop-by-hop normalisation.
  bool upgrade = false;            // the client asked for an upgrade (WebSocket)
  bool client_keep_alive = true;
  bool expect_continue = false;    // the client waits for 100 Continue (the driver sends it)

  // Body: the driver holds up to hold_limit bytes before anything goes upstream.
  size_t hold_limit = 0;
  bool had_body = false;    // the request declared a body
  bool body_whole = false;  // set by the driver: OnRequestBody gets the whole body in one call

  // Extension filters (extension_filter.h): their view of the head, and what they asked for.
  RequestHead filter_head;
  std::vector<ExtensionFilter*> full_body;  // filters that want OnFullBody
  std::vector<std::unique_ptr<BodyTransform>> transforms;
  std::vector<std::unique_ptr<ResponseTransform>> response_transforms;

  // Response: upstream must answer in identity encoding (a credential or a response transform
  // depends on seeing the plain bytes); an encoded answer is refused with 502.
  bool identity_response = false;
  // Hold the whole response body (<= response_hold_max) and pass it to OnResponseBody at once;
  // a longer body is refused with 502.
  bool hold_response = false;
  size_t response_hold_max = 0;

  // Consent (consent_filter.h): an undecided question stops the chain at the consent filter
  // (`head_resume` is its index); the driver polls the ticket, then runs the chain again from
  // there. `consent_decided` holds the credentials (indices) already decided for this request.
  std::shared_ptr<ConsentTicket> consent_wait;
  size_t consent_waiting_for = 0;  // credential index of consent_wait
  std::vector<size_t> consent_decided;
  size_t head_resume = 0;

  // A refusal: the driver answers `reply_status` with `reply_reason` (and records it).
  int reply_status = 0;
  std::string reply_reason;
  Status Refuse(int status, std::string reason) {
    reply_status = status;
    reply_reason = reason;
    return Error(ErrorCode::kPermissionDenied, std::move(reason));
  }
  // Compromise: a leak flag in `block`, then an error the driver turns into 451.
  Status Trip() { return Error(ErrorCode::kCompromised, "placeholder out of scope"); }
};

}  // namespace cloister::proxy
