// The HTTP driver: reads each request of a client connection, runs it through the filter chain
// (chain.h) and relays it and its response. It owns every piece of async I/O of an exchange (Beast
// parsers, the upstream connection, the streaming hold-back, 100 Continue, upgrades); the filters
// decide.
//
// One exchange (Forward) is a sequence of steps, each a method below: decide on the head (the
// chain, and a consent wait), read the held body, connect (or reuse) upstream, send the request,
// receive the response head, relay the response body, then an upgraded connection's pump. Every
// exchange leaves exactly one trace record, whichever step it ends in (the abort reason and the
// phases it reached: trace.h); one dropped with its event loop records proxy_stopped.
//
// Owned by Proxy::Impl (one per proxy); Serve runs on the event loop of the client connection.
#pragma once

#include <functional>
#include <optional>
#include <string>

#include "proxy/chain.h"
#include "proxy/exchange.h"
#include "proxy/http_head.h"
#include "proxy/net.h"
#include "proxy/proxy.h"
#include "proxy/trace.h"
#include "proxy/upstream.h"

namespace cloister::proxy {

using RequestParser = http::request_parser<http::buffer_body>;

// Writes `rec` to the proxy's trace (when it has one).
inline void Record(const ProxyConfig& config, const TraceRecord& rec) {
  if (config.trace) config.trace->Write(rec);
}

// Answers `status` with `reason` (Connection: close; the proxy's own answer, marked by
// X-Cloister-Proxy) and records `rec` with them.
template <class Client>
awaitable<void> WriteError(Client& client, int status, const std::string& reason, TraceRecord rec,
                           const ProxyConfig& config) {
  http::response<http::string_body> res{static_cast<http::status>(status), 11};
  res.set(http::field::content_type, "text/plain");
  res.set(http::field::connection, "close");
  res.set("X-Cloister-Proxy", "1");
  res.body() = "cloister proxy: " + reason + "\n";
  res.prepare_payload();
  co_await http::async_write(client, res, kTok);
  rec.status = status;
  rec.error = reason;
  Record(config, rec);
}

class HttpDriver {
 public:
  // `trip` marks the workspace compromised for the exchange's out-of-scope hits (Proxy::Impl).
  HttpDriver(const ProxyConfig& config, const ProxyContext& ctx, const Chain& chain,
             UpstreamConnector& upstreams, std::function<void(const Exchange&)> trip)
      : config_(config), ctx_(ctx), chain_(chain), upstreams_(upstreams), trip_(std::move(trip)) {}

  // The request loop of one client connection (the one place a request head is read): each head
  // is checked (http_head.h; a bad one is 400 and the connection closes) and forwarded, until the
  // client or a response ends the connection. A CONNECT in proxy mode (a plain, not transparent,
  // connection) ends the loop and returns its authority: the caller takes the connection over.
  // `Up` is the upstream leg (TcpSocket or TlsStream), `Client` the client's stream.
  template <class Up, class Client>
  awaitable<std::optional<Authority>> Serve(Client& client, beast::flat_buffer& cbuf,
                                            const Origin& origin);

 private:
  template <class Client, class Up>
  struct Turn;  // one exchange's state (http_driver.cc)
  // How a step toward the response head ended: go on; the exchange ended (answered, refused or
  // recorded); or a reused upstream connection failed before any byte of an answer.
  enum class Outcome { kOk, kEnded, kRetry };

  // Relays one request and its response. Returns whether the client connection may be reused.
  template <class Client, class Up>
  awaitable<bool> Forward(Client& client, beast::flat_buffer& cbuf, RequestParser& parser,
                          const Origin& origin, UpstreamSlot<Up>& up);
  // The steps of Forward, in order. Each returns false (or kEnded) when the exchange ended
  // (answered, refused, or its record written for a client gone): the client connection closes.
  template <class Client, class Up>
  awaitable<bool> DecideHead(Turn<Client, Up>& t);
  template <class Client, class Up>
  awaitable<bool> ReadHeldBody(Turn<Client, Up>& t);
  template <class Client, class Up>
  awaitable<bool> ConnectUpstream(Turn<Client, Up>& t);
  template <class Client, class Up>
  awaitable<Outcome> SendRequest(Turn<Client, Up>& t);
  template <class Client, class Up>
  awaitable<bool> StreamRequestBody(Turn<Client, Up>& t);
  template <class Client, class Up>
  awaitable<Outcome> ReceiveResponseHead(Turn<Client, Up>& t);
  // The response body: held whole for a filter, or streamed piece by piece. These set
  // t.client_ok / t.up_ok (and the record's abort when cut); RelayHeldResponse returns false
  // when it answered the client itself.
  template <class Client, class Up>
  awaitable<bool> RelayHeldResponse(Turn<Client, Up>& t);
  template <class Client, class Up>
  awaitable<void> RelayStreamedResponse(Turn<Client, Up>& t);
  // After a 101: raw bytes both ways until either side closes (not scanned: docs/threat-model.md).
  template <class Client, class Up>
  awaitable<void> PumpUpgraded(Turn<Client, Up>& t);

  // The proxy's own answer `status` with `reason`, and the exchange's record (with `abort`, when
  // the upstream gave no answer).
  template <class Client, class Up>
  awaitable<void> Answer(Turn<Client, Up>& t, int status, const std::string& reason,
                         const std::string& abort = "");
  // The client (or its stream, or the channel) went away `when`: recorded, nothing answered.
  template <class Client, class Up>
  void ClientWentAway(Turn<Client, Up>& t, const std::string& when);
  // A chain refusal: 451 and a trip when the exchange holds out-of-scope hits, else the
  // exchange's reply status. Always false (the connection closes).
  template <class Client, class Up>
  awaitable<bool> Refused(Turn<Client, Up>& t, const Status& st);

  const ProxyConfig& config_;
  const ProxyContext& ctx_;
  const Chain& chain_;
  UpstreamConnector& upstreams_;
  std::function<void(const Exchange&)> trip_;
};

}  // namespace cloister::proxy
