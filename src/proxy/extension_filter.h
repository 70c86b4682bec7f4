// Extension filters: the seam through which other modules plug their own filters into the proxy
// (ProxyConfig::extension_filters: aws/ SigV4 re-signing and credential custody, oauth/ logins),
// on a plain copy of the request head (no Beast types). Owned by proxy; implemented elsewhere. The
// chain runs them in one of its steps (extension_filter_adapter.h); the chain's own filters
// implement proxy::Filter (filter.h) instead.
//
// An extension filter sees a TLS-intercepted request only when the CONNECT host, SNI and Host header agree,
// after the compromise detector's head scan and the header substitution. It may rewrite the head
// and wrap the request body. Filters run on proxy threads, one request at a time per connection;
// an implementation shared by connections must be thread safe.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/result.h"

namespace cloister::proxy {

struct RequestHead {
  std::string method;  // "GET"
  std::string target;  // origin form as sent: "/bucket/key?uploads="
  std::string host;    // destination host (CONNECT authority = SNI = Host), lower-case, no port
  uint16_t port = 443;
  std::vector<std::pair<std::string, std::string>> headers;  // wire order, names as received
};

struct SwappedValue;  // below

// Wraps the request body (after de-chunking). Output length should equal input length when the
// body is streamed (the declared length is kept); a held body gets a recomputed Content-Length.
class BodyTransform {
 public:
  virtual ~BodyTransform() = default;
  virtual Result<std::string> Data(std::string_view in) = 0;  // bytes to forward now
  virtual Result<std::string> End() = 0;                      // at the end; error aborts upstream
  // After End: the real values this transform put into the body (the proxy treats them as it
  // treats ExtensionVerdict::swapped).
  virtual std::vector<SwappedValue> TakeSwapped();
};

// The upstream's response head as the proxy received it (status and headers in wire order).
struct ResponseHead {
  int status = 0;
  std::vector<std::pair<std::string, std::string>> headers;
};

// What a response transform asks for after seeing the head.
struct ResponseHold {
  bool hold = false;    // hold the whole body (<= max_body) and call OnBody before the guest sees it
  size_t max_body = 0;  // a longer body is refused: 502 to the guest, nothing of it forwarded
};

// One request's view of its response (a filter that must see what comes back, e.g. aws/ credential
// custody). Created by the filter in OnRequestHead, owned by the proxy for that one request.
// SECURITY: a request with a response transform is sent upstream with `Accept-Encoding: identity`;
// a response to it that still carries a Content-Encoding other than identity is refused (502), so
// OnBody always sees the bytes the guest would get.
// (The proxy sets that header after OnRequestHead returned: a filter that signs the head and has a
// response transform should set `Accept-Encoding: identity` itself before signing, so the proxy's
// set changes nothing. A verdict with handled == false is ignored, its response transform too.)
class ResponseTransform {
 public:
  virtual ~ResponseTransform() = default;
  // May rewrite the head. An error: 502 with the message to the guest, nothing of the response
  // forwarded, and the trace record carries the message.
  virtual Result<ResponseHold> OnHead(ResponseHead& head) = 0;
  // Only after hold: the whole body; returns the body the guest gets (Content-Length recomputed).
  // An error: as for OnHead.
  virtual Result<std::string> OnBody(ResponseHead& head, std::string body) = 0;
};

// A real value an extension filter put into the request. The proxy (extension_filter_adapter.cc)
// registers it with the response redactor (every form redactor.h knows: a reflecting upstream
// hands the guest the placeholder), names `credential` in the trace record's swaps, and refuses
// the request when `credential` is a workspace credential with an ask policy that was not decided
// for this request (consent_filter.h: WouldSwap must have named it).
// SECURITY: `real` is secret; the proxy wipes it once registered.
struct SwappedValue {
  std::string credential;   // a ProxyConfig::credentials id ("claude-subscription", "aws",
                            // "claude-subscription:refresh") or the filter's name for a value it
                            // holds itself ("aws:minted")
  std::string real;         // empty: a use that puts no value on the wire (an AWS signature)
  std::string placeholder;  // what the guest sent in its place
};

inline std::vector<SwappedValue> BodyTransform::TakeSwapped() { return {}; }

struct ExtensionVerdict {
  bool handled = false;         // false: the filter does not apply; the head is left as it was
  bool need_full_body = false;  // hold the whole body (<= max_body) and call OnFullBody
  size_t max_body = 0;
  std::unique_ptr<BodyTransform> body;  // optional
  std::unique_ptr<ResponseTransform> response;  // optional: sees (and may rewrite) the response
  // Every real value put into the request, in the head now or the body later (SwappedValue).
  std::vector<SwappedValue> swapped;
};

class ExtensionFilter {
 public:
  virtual ~ExtensionFilter() = default;
  // The ids of the workspace's credentials (ProxyConfig::credentials) whose real value
  // OnRequestHead would put into this request (pure: `head` is not changed). This is what the
  // consent filter asks about before any filter runs (credential_use.h); a filter swaps nothing
  // else of a credential with an ask policy (the proxy refuses such a swap, SwappedValue).
  virtual std::vector<std::string> WouldSwap(const RequestHead& head) const {
    (void)head;
    return {};
  }
  // May rewrite `head`. An error: 403 with the message, nothing forwarded; kCompromised: the
  // compromise detector trips (451, callback).
  virtual Result<ExtensionVerdict> OnRequestHead(RequestHead& head) = 0;
  // Only after need_full_body: the whole body (may rewrite the head; the body goes unchanged).
  virtual Status OnFullBody(RequestHead& head, std::string_view body) = 0;
};

}  // namespace cloister::proxy
