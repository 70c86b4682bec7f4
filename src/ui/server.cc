#include "ui/server.h"

#include <openssl/rand.h>

#include <condition_variable>
#include <mutex>
#include <set>
#include <thread>

#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "ui/assets.h"
#include "ui/consent.h"
#include "ui/peer_uid.h"
#include "ui/request.h"
#include "ui/traffic.h"

namespace cloister::ui {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

namespace {

constexpr char kCookieName[] = "cloister_ui";
constexpr size_t kMaxHeaderBytes = 8 * 1024;
// Every response: no script but our own files, no other origin, no framing, no referrer, and no
// caching of data that came from a guest.
constexpr char kCsp[] =
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
    "form-action 'none'; frame-ancestors 'none'; base-uri 'none'";

Result<std::string> RandomToken(size_t bytes = 32) {
  unsigned char b[32];
  if (bytes > sizeof b) bytes = sizeof b;
  if (RAND_bytes(b, static_cast<int>(bytes)) != 1) {
    return Error(ErrorCode::kUnavailable, "no randomness for the dashboard's token (RAND_bytes)");
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string s;
  for (size_t i = 0; i < bytes; ++i) {
    s += kHex[b[i] >> 4];
    s += kHex[b[i] & 15];
  }
  return s;
}

using Request = http::request<http::string_body>;
using Response = http::response<http::string_body>;

}  // namespace

struct Server::Impl {
  Backend& backend;
  ServerOptions options;
  asio::io_context io;
  tcp::acceptor acceptor{io};
  uint16_t port = 0;
  std::string host_name;  // "<32 hex>.localhost"
  std::string token, csrf;
  std::thread accept_thread, reaper_thread;

  std::mutex mu;
  std::condition_variable cv;
  bool stopping = false;
  std::set<tcp::socket*> open;
  size_t threads = 0;
  // The session the token bought (guarded by mu; "" until then; the token buys one, once).
  std::string session;
  bool token_used = false;
  // Connections blocked in I/O and until when (guarded by mu): the reaper shuts them then.
  std::map<tcp::socket*, std::chrono::steady_clock::time_point> deadlines;

  // Last audit report per workspace (memory only; the page shows it until the next run).
  std::mutex audit_mu;
  std::map<std::string, nlohmann::json> audits;

  // Consent listeners on the running workspaces (started last, stopped first).
  std::unique_ptr<ConsentDesk> desk;

  Impl(Backend& b, ServerOptions o) : backend(b), options(o) {}

  void AcceptLoop();
  void ReapLoop();
  // The next I/O on `sock` must end within io_timeout (Clear: no limit while the request runs).
  void Deadline(tcp::socket& sock) {
    std::lock_guard<std::mutex> l(mu);
    deadlines[&sock] = std::chrono::steady_clock::now() + options.io_timeout;
  }
  void Clear(tcp::socket& sock) {
    std::lock_guard<std::mutex> l(mu);
    deadlines.erase(&sock);
  }
  bool Authed(const std::optional<std::string>& cookie) {
    std::lock_guard<std::mutex> l(mu);
    return cookie && !session.empty() && SecretEquals(*cookie, session);
  }
  void Serve(tcp::socket& sock);
  // Fills `res` for `req`; returns true when the connection must instead become a live stream
  // (`name` set to the workspace, `offset` where to start).
  bool Handle(const Request& req, Response& res, std::string& name, uint64_t& offset);
  std::optional<Route> Admit(const Request& req, Response& res);
  void RedeemToken(const std::string& offered, Response& res);
  bool Dispatch(const Request& req, Route& route, Response& res, std::string& name, uint64_t& offset);
  void ServeAsset(const Route& route, Response& res);
  void ServeTraffic(Route& route, Response& res);
  void ServeConfirm(Route& route, Response& res);
  void RunAction(const Request& req, const Route& route, Response& res);
  void ServeAudit(const Request& req, const Route& route, Response& res);
  void AnswerConsent(const Request& req, const Route& route, Response& res);
  Result<nlohmann::json> AllLeaks();
  void Live(tcp::socket& sock, const std::string& name, uint64_t offset);
  bool Stopping() {
    std::lock_guard<std::mutex> l(mu);
    return stopping;
  }
};

namespace {

void SetCommon(Response& res) {
  res.set(http::field::server, "cloister-ui");
  res.set("Content-Security-Policy", kCsp);
  res.set("X-Content-Type-Options", "nosniff");
  res.set("X-Frame-Options", "DENY");
  res.set("Referrer-Policy", "no-referrer");
  res.set("Cross-Origin-Resource-Policy", "same-origin");
  res.set("Cross-Origin-Opener-Policy", "same-origin");
  res.set(http::field::cache_control, "no-store");
}

void Text(Response& res, http::status status, const std::string& text) {
  res.result(status);
  res.set(http::field::content_type, "text/plain; charset=utf-8");
  res.body() = text + "\n";
}

void Json(Response& res, http::status status, const nlohmann::json& j) {
  res.result(status);
  res.set(http::field::content_type, "application/json");
  res.body() = Dump(j);
}

http::status StatusOf(const Error& e) {
  switch (e.code()) {
    case ErrorCode::kInvalidArgument: return http::status::bad_request;
    case ErrorCode::kNotFound: return http::status::not_found;
    case ErrorCode::kFailedPrecondition:
    case ErrorCode::kCompromised:
    case ErrorCode::kBusy:
    case ErrorCode::kAlreadyExists: return http::status::conflict;
    case ErrorCode::kPermissionDenied: return http::status::forbidden;
    case ErrorCode::kUnavailable: return http::status::service_unavailable;
    default: return http::status::internal_server_error;
  }
}

void Fail(Response& res, const Error& e) {
  nlohmann::json j = {{"error", e.message()}};
  if (!e.hint().empty()) j["hint"] = e.hint();
  Json(res, StatusOf(e), j);
}

void Refuse(Response& res, http::status status, const std::string& why) {
  Json(res, status, {{"error", why}, {"refused", true}});
}

}  // namespace

// The printed URL's token buys the session cookie, once (SECURITY: a token read later buys nothing).
void Server::Impl::RedeemToken(const std::string& offered, Response& res) {
  if (!SecretEquals(offered, token)) {
    Text(res, http::status::forbidden,
         "wrong token: open the URL that `cloister ui` printed (it changes on every start)");
    return;
  }
  std::string bought;
  {
    std::lock_guard<std::mutex> l(mu);
    if (!token_used) {
      auto s = RandomToken();
      if (s.ok()) {
        token_used = true;
        session = *s;
        bought = *s;
      }
    }
  }
  if (bought.empty()) {
    // SECURITY: one use. A token read later (a history, a log) buys nothing.
    Text(res, http::status::forbidden,
         "this link was used already: its one session is in the browser that opened it; "
         "run `cloister ui` again for a new link");
    return;
  }
  if (options.on_session) options.on_session();
  res.result(http::status::see_other);
  res.set(http::field::location, "/");
  // Host-only (no Domain): the browser sends it to this run's name only.
  res.set(http::field::set_cookie, std::string(kCookieName) + "=" + bought +
                                       "; HttpOnly; SameSite=Strict; Path=/");
}

// Steps 1-4 of every request (SECURITY: server.h): the Host, the Origin, the route, the session
// and, for a POST, the CSRF token and JSON. nullopt: `res` holds the refusal.
std::optional<Route> Server::Impl::Admit(const Request& req, Response& res) {
  // 1. DNS rebinding: a page on evil.example whose name now resolves to 127.0.0.1 reaches this
  // port with Host: evil.example. Only this run's name and port are served (not 127.0.0.1 nor
  // localhost: a cookie of theirs would go to every local web app, whatever its port).
  if (!IsOwnHost(req[http::field::host], host_name, port)) {
    Refuse(res, http::status::misdirected_request,
           "the Host header must be " + host_name + ":" + std::to_string(port) +
               " (open the URL `cloister ui` printed)");
    return std::nullopt;
  }
  // 2. Other origins: a foreign Origin is refused on every request, and a POST must carry ours
  // (browsers always send Origin on POST; fail closed when it is absent).
  auto origin = req.find(http::field::origin);
  bool is_post = req.method() == http::verb::post;
  if (origin != req.end() ? !IsOwnOrigin(origin->value(), host_name, port) : is_post) {
    Refuse(res, http::status::forbidden, "cross-origin request refused");
    return std::nullopt;
  }
  auto route = ParseRoute(req.method_string(), req.target());
  if (!route.ok()) {
    Fail(res, route.error());
    return std::nullopt;
  }
  // 3. The session: the printed URL's token buys the cookie, once; nothing else is served
  // without it.
  std::optional<std::string> cookie = CookieValue(req[http::field::cookie], kCookieName);
  bool authed = Authed(cookie);
  if (route->kind == RouteKind::kIndex && route->query.count("token")) {
    RedeemToken(route->query["token"], res);
    return std::nullopt;
  }
  if (!authed) {
    Text(res, http::status::unauthorized,
         "no session: open the URL with ?token= that `cloister ui` printed");
    return std::nullopt;
  }
  // 4. Actions: the CSRF token in a header (a cross-site form cannot set one) and JSON.
  if (is_post) {
    if (!SecretEquals(req["X-CSRF-Token"], csrf)) {
      Refuse(res, http::status::forbidden, "missing or wrong CSRF token");
      return std::nullopt;
    }
    if (req[http::field::content_type] != "application/json") {
      Refuse(res, http::status::unsupported_media_type, "actions take application/json");
      return std::nullopt;
    }
  }
  return std::move(route).value();
}

bool Server::Impl::Handle(const Request& req, Response& res, std::string& live_name,
                          uint64_t& live_offset) {
  SetCommon(res);
  std::optional<Route> route = Admit(req, res);
  if (!route) return false;
  return Dispatch(req, *route, res, live_name, live_offset);
}

// Every workspace's leak rows (the leaks view).
Result<nlohmann::json> Server::Impl::AllLeaks() {
  ASSIGN_OR_RETURN(nlohmann::json list, backend.ListWorkspaces());
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& ws : list) {
    std::string name = ws.value("name", "");
    if (!ValidWorkspaceName(name)) continue;
    auto path = backend.TracePath(name);
    if (!path.ok()) continue;  // a damaged workspace: ls shows its problem
    uint64_t offset = 0;
    for (;;) {
      auto chunk = ReadTraceFrom(*path, offset);
      if (!chunk.ok()) break;
      for (auto& row : LeakRows(ws, chunk->records)) rows.push_back(std::move(row));
      if (chunk->next_offset == offset) break;
      offset = chunk->next_offset;
    }
  }
  return rows;
}

// Step 5: the admitted request's route, one handler each.
bool Server::Impl::Dispatch(const Request& req, Route& route, Response& res,
                            std::string& live_name, uint64_t& live_offset) {
  switch (route.kind) {
    case RouteKind::kNotFound:
      break;
    case RouteKind::kIndex:
    case RouteKind::kAsset:
      ServeAsset(route, res);
      return false;
    case RouteKind::kSession:
      Json(res, http::status::ok, {{"csrf", csrf}});
      return false;
    case RouteKind::kWorkspaces: {
      auto list = backend.ListWorkspaces();
      if (!list.ok()) return Fail(res, list.error()), false;
      Json(res, http::status::ok, *list);
      return false;
    }
    case RouteKind::kWorkspace: {
      auto d = backend.DescribeWorkspace(route.name);
      if (!d.ok()) return Fail(res, d.error()), false;
      Json(res, http::status::ok, *d);
      return false;
    }
    case RouteKind::kTraffic:
      ServeTraffic(route, res);
      return false;
    case RouteKind::kTrafficLive: {
      auto path = backend.TracePath(route.name);
      if (!path.ok()) return Fail(res, path.error()), false;
      live_offset = 0;
      if (auto it = route.query.find("offset"); it != route.query.end()) {
        live_offset = std::strtoull(it->second.c_str(), nullptr, 10);
      }
      live_name = route.name;
      return true;
    }
    case RouteKind::kConfirm:
      ServeConfirm(route, res);
      return false;
    case RouteKind::kAction:
      RunAction(req, route, res);
      return false;
    case RouteKind::kAudit:
      ServeAudit(req, route, res);
      return false;
    case RouteKind::kConsent:
      Json(res, http::status::ok, desk->Pending());
      return false;
    case RouteKind::kConsentAnswer:
      AnswerConsent(req, route, res);
      return false;
    case RouteKind::kLeaks: {
      auto rows = AllLeaks();
      if (!rows.ok()) return Fail(res, rows.error()), false;
      Json(res, http::status::ok, *rows);
      return false;
    }
  }
  Text(res, http::status::not_found, "not found");
  return false;
}

// The page and its assets (built in, ui/assets.h).
void Server::Impl::ServeAsset(const Route& route, Response& res) {
  auto asset = FindAsset(route.kind == RouteKind::kIndex ? "index.html" : route.asset);
  if (!asset) return Text(res, http::status::not_found, "not found");
  res.result(http::status::ok);
  res.set(http::field::content_type, std::string(asset->content_type));
  res.body() = std::string(asset->data);
}

// A workspace's trace: the whole file in windows (the view keeps the last `limit` that match).
void Server::Impl::ServeTraffic(Route& route, Response& res) {
  auto filter = ParseTrafficFilter(route.query);
  if (!filter.ok()) return Fail(res, filter.error());
  auto path = backend.TracePath(route.name);
  if (!path.ok()) return Fail(res, path.error());
  std::vector<proxy::TraceRecord> kept;
  uint64_t offset = 0;
  for (;;) {
    auto chunk = ReadTraceFrom(*path, offset);
    if (!chunk.ok()) return Fail(res, chunk.error());
    for (auto& r : chunk->records) {
      if (filter->Matches(r)) kept.push_back(std::move(r));
    }
    if (kept.size() > filter->limit) kept.erase(kept.begin(), kept.end() - filter->limit);
    if (chunk->next_offset == offset) break;
    offset = chunk->next_offset;
  }
  nlohmann::json arr = nlohmann::json::array();
  for (const auto& r : kept) arr.push_back(RecordJson(r));
  Json(res, http::status::ok, {{"records", arr}, {"offset", offset}});
}

// What an action would do, said before it runs (the confirmation's text).
void Server::Impl::ServeConfirm(Route& route, Response& res) {
  std::string cp = route.query.count("checkpoint") ? route.query["checkpoint"] : "";
  if (!cp.empty() && !ValidCheckpointId(cp)) {
    return Fail(res, Error(ErrorCode::kInvalidArgument, "invalid checkpoint id"));
  }
  auto text = backend.ConfirmText(route.name, route.action, cp);
  if (!text.ok()) return Fail(res, text.error());
  Json(res, http::status::ok,
       {{"action", ActionName(route.action)}, {"destructive", IsDestructive(route.action)},
        {"text", *text}});
}

// A lifecycle action; a destructive one only when the body confirms it.
void Server::Impl::RunAction(const Request& req, const Route& route, Response& res) {
  auto body = ParseActionBody(req.body());
  if (!body.ok()) return Fail(res, body.error());
  if (IsDestructive(route.action) && !body->confirm) {
    return Refuse(res, http::status::precondition_required,
                  std::string(ActionName(route.action)) +
                      " drops data: confirm first (the page shows what goes)");
  }
  if (route.action == Action::kCheckpointRestore && body->checkpoint.empty()) {
    return Fail(res, Error(ErrorCode::kInvalidArgument, "restore needs a checkpoint id"));
  }
  auto msg = backend.Run(route.name, route.action, body->checkpoint);
  if (!msg.ok()) return Fail(res, msg.error());
  Json(res, http::status::ok, {{"ok", true}, {"message", *msg}});
}

// GET: the last audit report of the workspace (null before one); POST: a new audit.
void Server::Impl::ServeAudit(const Request& req, const Route& route, Response& res) {
  if (req.method() != http::verb::post) {
    std::lock_guard<std::mutex> l(audit_mu);
    auto it = audits.find(route.name);
    return Json(res, http::status::ok, it == audits.end() ? nlohmann::json(nullptr) : it->second);
  }
  auto report = backend.RunAudit(route.name);
  if (!report.ok()) return Fail(res, report.error());
  {
    std::lock_guard<std::mutex> l(audit_mu);
    audits[route.name] = *report;
  }
  Json(res, http::status::ok, *report);
}

// The user's answer to a consent question of a running workspace.
void Server::Impl::AnswerConsent(const Request& req, const Route& route, Response& res) {
  auto body = ParseActionBody(req.body());
  if (!body.ok()) return Fail(res, body.error());
  if (body->grant.empty()) return Fail(res, Error(ErrorCode::kInvalidArgument, "answer needs a grant"));
  Status s = desk->Answer(route.name, route.consent_id, body->grant);
  if (!s.ok()) return Fail(res, s.error());
  Json(res, http::status::ok, {{"ok", true}, {"message", route.name + ": " + body->grant +
                                                             " given to question " +
                                                             std::to_string(route.consent_id)}});
}

void Server::Impl::Live(tcp::socket& sock, const std::string& name, uint64_t offset) {
  beast::error_code ec;
  std::string head =
      "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-store\r\n"
      "X-Content-Type-Options: nosniff\r\nContent-Security-Policy: " +
      std::string(kCsp) + "\r\nConnection: close\r\n\r\n: live\n\n";
  Deadline(sock);
  asio::write(sock, asio::buffer(head), ec);
  Clear(sock);
  auto last_write = std::chrono::steady_clock::now();
  while (!ec && !Stopping()) {
    auto path = backend.TracePath(name);
    if (!path.ok()) break;
    auto chunk = ReadTraceFrom(*path, offset);
    if (!chunk.ok()) break;
    std::string out;
    for (const auto& r : chunk->records) out += "data: " + Dump(RecordJson(r)) + "\n\n";
    offset = chunk->next_offset;
    auto now = std::chrono::steady_clock::now();
    if (out.empty() && now - last_write > std::chrono::seconds(10)) out = ": ping\n\n";
    if (!out.empty()) {
      Deadline(sock);  // a reader that stops reading does not hold the stream forever
      asio::write(sock, asio::buffer(out), ec);
      Clear(sock);
      last_write = now;
    }
    std::unique_lock<std::mutex> l(mu);
    cv.wait_for(l, options.tail_interval, [this] { return stopping; });
  }
}

void Server::Impl::Serve(tcp::socket& sock) {
  beast::flat_buffer buf;
  for (;;) {
    beast::error_code ec;
    http::request_parser<http::string_body> parser;
    parser.header_limit(kMaxHeaderBytes);
    parser.body_limit(kMaxBodyBytes);
    // SECURITY: the whole request within io_timeout (the reaper shuts a slow or idle one).
    Deadline(sock);
    http::read(sock, buf, parser, ec);
    Clear(sock);
    if (ec) {
      if (ec == http::error::body_limit || ec == http::error::header_limit) {
        Response res{http::status::payload_too_large, 11};
        SetCommon(res);
        Text(res, http::status::payload_too_large, "request too large");
        res.keep_alive(false);
        res.prepare_payload();
        Deadline(sock);
        http::write(sock, res, ec);
        Clear(sock);
      }
      break;
    }
    Request req = parser.release();
    Response res{http::status::ok, req.version()};
    std::string live;
    uint64_t offset = 0;
    if (Handle(req, res, live, offset)) {
      Live(sock, live, offset);
      break;
    }
    res.keep_alive(req.keep_alive());
    res.prepare_payload();
    Deadline(sock);
    http::write(sock, res, ec);
    Clear(sock);
    if (ec || !req.keep_alive() || Stopping()) break;
  }
  beast::error_code ignored;
  sock.shutdown(tcp::socket::shutdown_both, ignored);
}

void Server::Impl::AcceptLoop() {
  for (;;) {
    beast::error_code ec;
    tcp::socket sock(io);
    acceptor.accept(sock, ec);
    if (Stopping()) return;
    if (ec) {  // EMFILE and the like: do not spin
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      continue;
    }
    // SECURITY: the user's own connections only (another local user's is closed unread), so
    // nobody else can hold the connection slots; fail closed when the owner cannot be read.
    tcp::endpoint peer = sock.remote_endpoint(ec);
    auto uid = ec ? Result<uid_t>(Error(ErrorCode::kUnavailable, ec.message()))
                  : LoopbackPeerUid(peer.port(), port);
    if (!uid.ok() || *uid != options.user) {
      sock.close(ec);
      continue;
    }
    std::unique_lock<std::mutex> l(mu);
    if (threads >= options.max_connections) {
      l.unlock();
      sock.close(ec);  // too many at once: the browser retries
      continue;
    }
    ++threads;
    auto* owned = new tcp::socket(std::move(sock));
    open.insert(owned);
    l.unlock();
    std::thread([this, owned] {
      Serve(*owned);
      std::lock_guard<std::mutex> g(mu);
      deadlines.erase(owned);
      open.erase(owned);
      delete owned;
      --threads;
      cv.notify_all();
    }).detach();
  }
}

void Server::Impl::ReapLoop() {
  std::unique_lock<std::mutex> l(mu);
  while (!stopping) {
    auto now = std::chrono::steady_clock::now();
    for (auto it = deadlines.begin(); it != deadlines.end();) {
      if (it->second <= now) {
        // A shutdown, not a close: the connection's thread closes its own socket.
        beast::error_code ec;
        it->first->shutdown(tcp::socket::shutdown_both, ec);
        it = deadlines.erase(it);
      } else {
        ++it;
      }
    }
    cv.wait_for(l, std::min<std::chrono::milliseconds>(options.io_timeout / 4,
                                                       std::chrono::milliseconds(500)));
  }
}

Result<std::unique_ptr<Server>> Server::Start(Backend& backend, ServerOptions options) {
  auto impl = std::make_unique<Impl>(backend, options);
  ASSIGN_OR_RETURN(impl->token, RandomToken());
  ASSIGN_OR_RETURN(impl->csrf, RandomToken());
  ASSIGN_OR_RETURN(std::string name, RandomToken(16));
  impl->host_name = name + ".localhost";
  beast::error_code ec;
  tcp::endpoint ep(asio::ip::make_address_v4("127.0.0.1"), options.port);
  impl->acceptor.open(ep.protocol(), ec);
  if (!ec) impl->acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) impl->acceptor.bind(ep, ec);
  if (!ec) impl->acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    return Error(ErrorCode::kUnavailable,
                 "cannot listen on 127.0.0.1:" + std::to_string(options.port) + ": " + ec.message(),
                 options.port ? "pick another --port, or omit it for a random one" : "");
  }
  impl->port = impl->acceptor.local_endpoint().port();
  impl->desk = std::make_unique<ConsentDesk>([&backend] { return backend.ControlSockets(); });
  Impl* raw = impl.get();
  impl->accept_thread = std::thread([raw] { raw->AcceptLoop(); });
  impl->reaper_thread = std::thread([raw] { raw->ReapLoop(); });
  return std::unique_ptr<Server>(new Server(std::move(impl)));
}

Server::Server(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Server::~Server() { Stop(); }

uint16_t Server::port() const { return impl_->port; }

const std::string& Server::host_name() const { return impl_->host_name; }

std::string Server::Url() const {
  return "http://" + impl_->host_name + ":" + std::to_string(impl_->port) + "/?token=" +
         impl_->token;
}

void Server::Stop() {
  {
    std::lock_guard<std::mutex> l(impl_->mu);
    if (impl_->stopping) return;
    impl_->stopping = true;
    // Wake the blocked reads of every connection (a shutdown, not a close: each thread closes
    // its own socket).
    for (tcp::socket* s : impl_->open) {
      beast::error_code ec;
      s->shutdown(tcp::socket::shutdown_both, ec);
    }
  }
  impl_->cv.notify_all();
  beast::error_code ec;
  impl_->acceptor.cancel(ec);
  // Unblock accept(): connect to ourselves once.
  {
    tcp::socket poke(impl_->io);
    poke.connect(tcp::endpoint(asio::ip::make_address_v4("127.0.0.1"), impl_->port), ec);
  }
  if (impl_->accept_thread.joinable()) impl_->accept_thread.join();
  if (impl_->reaper_thread.joinable()) impl_->reaper_thread.join();
  impl_->acceptor.close(ec);
  std::unique_lock<std::mutex> l(impl_->mu);
  impl_->cv.wait(l, [this] { return impl_->threads == 0; });
  l.unlock();
  impl_->desk.reset();  // no request thread is left to use it
}

}  // namespace cloister::ui
