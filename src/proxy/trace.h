// Per-workspace request trace: one JSON line per request the proxy handled.
//
// File: <workspace dir>/trace.jsonl (0600), appended by the proxy in the supervisor, read by
// `cloister trace ls|summary|leaks`. Fields: time (unix ms), host, port, method, path (query
// string removed), status, bytes_up/bytes_down (body bytes), latency_ms (request head to end of
// response), swaps (credential ids substituted), leaks ([{credential, where, encoding, action}]),
// blocked, error (why the proxy refused or failed, e.g. "egress policy: ..."), mode ("transparent"
// for the guest's redirected connections, the "egress" service; absent for proxy mode), source
// ("browser" for the workspace's browser VM; absent for the workspace's own VM), consent
// ([{credential, decision, by, grant_s, asked}]: each ask-before-use decision; absent if none),
// abort (why the request ended without a whole response, one of the kAbort* codes below; absent
// when it got one, even an error status), phases ({dns_ms, connect_ms, tls_ms, first_byte_ms,
// body_ms}: the phases it reached; absent if none).
// Every request the proxy read a head of gets exactly one record, aborted or not; so does a CONNECT
// or transparent stream that ends before any request (refused, a failed handshake, nothing sent).
// SECURITY: never a secret value. Placeholders are not secret; real values never reach a record
// (the proxy only records ids), and query strings are dropped because they may carry other data.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/result.h"

namespace cloister::proxy {

inline constexpr char kTraceFile[] = "trace.jsonl";

struct LeakFlag {
  std::string credential;  // credential id
  std::string where;       // "url", "header:<name>", "body"
  std::string encoding;    // raw, url, base64
  std::string action;      // "blocked" or "flagged" (LLM body policy)
};

// A consent decision about one credential of this request (proxy/consent_filter.h).
struct ConsentRecord {
  std::string credential;  // credential id
  std::string decision;    // request, 5m, 1h, vm, grant (an earlier grant), deny, refused
  std::string by;          // who decided ("approve pid 42"), or why refused ("no listener")
  int64_t grant_s = 0;     // the grant's length in seconds (-1: until the VM stops; 0: none)
  bool asked = false;      // a person was asked for this request (false: a grant covered it)
};

// How long each phase of a request took, in ms, from the proxy's view; -1: the phase did not
// happen (a reused upstream connection has no dns, connect or tls) or was not reached.
struct TracePhases {
  double dns_ms = -1;         // resolving the upstream's name
  double connect_ms = -1;     // TCP connect to the upstream
  double tls_ms = -1;         // the upstream's TLS handshake
  double first_byte_ms = -1;  // request sent -> the response head read
  double body_ms = -1;        // the response head -> its last byte relayed
};

// Why a request ended without a whole response (TraceRecord::abort).
inline constexpr char kAbortClientGone[] = "client_gone";        // the client closed or reset
inline constexpr char kAbortStreamReset[] = "stream_reset";      // the guest reset its stream
inline constexpr char kAbortChannelClosed[] = "channel_closed";  // the host-guest channel ended
inline constexpr char kAbortProxyStopped[] = "proxy_stopped";    // the proxy stopped (VM stop)
inline constexpr char kAbortUpstreamRefused[] = "upstream_refused";  // no connection (502)
inline constexpr char kAbortUpstreamTimeout[] = "upstream_timeout";  // no answer in time (504)
inline constexpr char kAbortUpstreamClosed[] = "upstream_closed";    // closed mid-answer

struct TraceRecord {
  int64_t time_ms = 0;
  std::string host;
  uint16_t port = 0;
  std::string method;
  std::string path;
  int status = 0;
  uint64_t bytes_up = 0;
  uint64_t bytes_down = 0;
  double latency_ms = 0;
  std::vector<std::string> swaps;
  std::vector<LeakFlag> leaks;
  bool blocked = false;
  std::string error;  // short reason for 4xx/5xx produced by the proxy itself
  std::string mode;   // "" (proxy mode: CONNECT / absolute-form) or "transparent"
  // Which VM sent it: "" (the workspace) or "browser" (its browser VM, supervisor/browser_vm.h).
  std::string source;
  std::vector<ConsentRecord> consent;  // ask-credentials of this request and their decisions
  std::string abort;  // "" (a whole response) or a kAbort* code; `error` says more
  TracePhases phases;

  nlohmann::json ToJson() const;
  static Result<TraceRecord> FromJson(const nlohmann::json& j);
};

// Removes the query string and bounds the length.
std::string TracePath(std::string_view target);

class TraceSink {
 public:
  // Opens (creating 0600) for appending.
  static Result<std::shared_ptr<TraceSink>> Open(const std::string& path);
  ~TraceSink();
  // Thread safe; one write(2) per record with O_APPEND.
  void Write(const TraceRecord& rec);

 private:
  TraceSink() = default;
  std::mutex mu_;
  int fd_ = -1;
};

// Reads a trace file; malformed lines are skipped (the file is ours, but may be truncated by a
// crash). Returns at most the last `max_records` records.
Result<std::vector<TraceRecord>> ReadTrace(const std::string& path, size_t max_records = 1000000);

struct HostSummary {
  std::string host;
  uint64_t requests = 0, errors = 0, bytes_up = 0, bytes_down = 0, swaps = 0, leaks = 0;
  double p50_ms = 0, p99_ms = 0;
};
std::vector<HostSummary> Summarize(const std::vector<TraceRecord>& records);

}  // namespace cloister::proxy
