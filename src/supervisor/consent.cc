#include "supervisor/consent.h"

#include <sys/socket.h>
#include <sys/time.h>

#include <algorithm>
#include <set>

namespace cloister::vm {

using nlohmann::json;
using proxy::ConsentAnswer;
using Protocol = ConsentBroker::ListenerOptions::Protocol;

const char* GrantName(Grant g) {
  switch (g) {
    case Grant::kRequest: return "request";
    case Grant::kFiveMinutes: return "5m";
    case Grant::kOneHour: return "1h";
    case Grant::kUntilVmStops: return "vm";
    case Grant::kDeny: break;
  }
  return "deny";
}

std::optional<Grant> ParseGrant(std::string_view name) {
  for (Grant g : {Grant::kRequest, Grant::kFiveMinutes, Grant::kOneHour, Grant::kUntilVmStops,
                  Grant::kDeny}) {
    if (name == GrantName(g)) return g;
  }
  return std::nullopt;
}

namespace {

// SECURITY: guest-chosen text is bounded before it is stored or sent to a listener.
std::string Bounded(std::string_view s) {
  std::string out(s.substr(0, kMaxQuestionField));
  if (s.size() > kMaxQuestionField) out += "...";
  return out;
}

json GrantsFor(bool timed) {
  if (!timed) return json::array({"request", "deny"});
  return json::array({"request", "5m", "1h", "vm", "deny"});
}

std::optional<std::chrono::seconds> GrantLength(Grant g) {
  if (g == Grant::kFiveMinutes) return std::chrono::minutes(5);
  if (g == Grant::kOneHour) return std::chrono::hours(1);
  return std::nullopt;
}

int PeerPid(int fd) {
  ucred cred{};
  socklen_t len = sizeof(cred);
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) return -1;
  return cred.pid;
}

// A question id: a non-negative integer (however the JSON number was typed).
std::optional<uint64_t> QuestionId(const json& doc) {
  auto id = doc.find("id");
  if (id == doc.end()) return std::nullopt;
  if (id->is_number_unsigned()) return id->get<uint64_t>();
  if (id->is_number_integer() && id->get<int64_t>() >= 0) return id->get<int64_t>();
  return std::nullopt;
}

std::string Who(const std::string& client, int pid) {
  std::string c;
  for (char ch : client.substr(0, 32)) {
    c += (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '-' ? ch : '?';
  }
  if (c.empty()) c = "listener";
  return pid > 0 ? c + " pid " + std::to_string(pid) : c;
}

}  // namespace

struct ConsentBroker::Pending {
  uint64_t id = 0;
  std::string kind;  // "cred" or "ssh"
  proxy::ConsentQuestion q;
  std::string request, fingerprint;  // ssh
  Clock::time_point asked_at, deadline;
  int listening = 0;  // live listeners that were sent this question
  std::optional<ConsentAnswer> answer;
  std::function<void()> wake;  // the waiting ticket's (ConsentTicket::OnDecided); called once
  bool Timed() const { return kind == "cred" && q.ask == vault::ConsentAsk::kOnce; }
};

struct ConsentBroker::Listener {
  LineConn* conn = nullptr;
  Protocol protocol = Protocol::kConsent;
  std::string by;
  std::set<uint64_t> open;  // questions sent to it and still pending
};

class ConsentBroker::Ticket : public proxy::ConsentTicket {
 public:
  Ticket(std::weak_ptr<ConsentBroker> broker, std::shared_ptr<Pending> p)
      : broker_(std::move(broker)), p_(std::move(p)) {}
  ~Ticket() override {
    if (auto b = broker_.lock()) {
      std::lock_guard<std::mutex> l(b->mu_);
      p_->wake = nullptr;  // never called once the ticket is gone (ConsentTicket::OnDecided)
      if (!p_->answer) b->WithdrawLocked(p_->id);
    }
  }
  std::optional<ConsentAnswer> Poll() override {
    auto b = broker_.lock();
    if (!b) return p_->answer ? p_->answer : ConsentAnswer{false, "refused", "stopping", 0};
    std::lock_guard<std::mutex> l(b->mu_);
    b->ExpireLocked(p_);
    if (!p_->answer) return std::nullopt;
    ConsentAnswer a = *p_->answer;
    a.asked = true;  // this question was put to a listener
    return a;
  }
  void OnDecided(std::function<void()> wake) override {
    if (auto b = broker_.lock()) {
      std::unique_lock<std::mutex> l(b->mu_);
      b->ExpireLocked(p_);
      if (!p_->answer) {
        p_->wake = std::move(wake);  // ResolveLocked calls it
        return;
      }
      p_->wake = nullptr;
    }
    if (wake) wake();  // decided already (or the broker is gone: Poll says "stopping")
  }
  std::chrono::milliseconds TimeLeft() override {
    auto b = broker_.lock();
    if (!b) return std::chrono::milliseconds(0);
    std::lock_guard<std::mutex> l(b->mu_);
    if (p_->answer) return std::chrono::milliseconds(0);
    // Rounded up, so a waiter that sleeps this long finds the deadline passed.
    return std::max(std::chrono::milliseconds(0),
                    std::chrono::ceil<std::chrono::milliseconds>(p_->deadline - b->Now()));
  }

 private:
  std::weak_ptr<ConsentBroker> broker_;
  std::shared_ptr<Pending> p_;
};

// A ticket decided from the start (a grant, no listener).
class DecidedTicket : public proxy::ConsentTicket {
 public:
  explicit DecidedTicket(ConsentAnswer a) : a_(std::move(a)) {}
  std::optional<ConsentAnswer> Poll() override { return a_; }

 private:
  ConsentAnswer a_;
};

ConsentBroker::ConsentBroker(Options options) : opts_(std::move(options)) {
  if (!opts_.now) opts_.now = [] { return Clock::now(); };
}

ConsentBroker::~ConsentBroker() { Stop(); }

ConsentBroker::Clock::time_point ConsentBroker::Now() const { return opts_.now(); }

void ConsentBroker::Log(const std::string& line) const {
  if (opts_.log) opts_.log(line);
}

int ConsentBroker::listeners() const {
  std::lock_guard<std::mutex> l(mu_);
  return static_cast<int>(std::count_if(listeners_.begin(), listeners_.end(), [](const auto& x) {
    return x->protocol == Protocol::kConsent;
  }));
}

int ConsentBroker::ssh_listeners() const {
  std::lock_guard<std::mutex> l(mu_);
  return static_cast<int>(std::count_if(listeners_.begin(), listeners_.end(), [](const auto& x) {
    return x->protocol == Protocol::kSshConfirm;
  }));
}

std::optional<ConsentAnswer> ConsentBroker::GrantCoversLocked(const std::string& credential) {
  auto it = grants_.find(credential);
  if (it == grants_.end()) return std::nullopt;
  if (it->second.expires && Now() >= *it->second.expires) {
    Log("consent: the " + std::string(GrantName(it->second.grant)) + " grant of " + credential +
        " expired");
    grants_.erase(it);
    return std::nullopt;
  }
  int64_t left = -1;
  if (it->second.expires) {
    left = std::chrono::duration_cast<std::chrono::seconds>(*it->second.expires - Now()).count();
  }
  return ConsentAnswer{true, "grant", it->second.by + " (" + GrantName(it->second.grant) + ")",
                       left};
}

bool ConsentBroker::SendQuestionLocked(Listener& l, const Pending& p) {
  json line;
  if (l.protocol == Protocol::kSshConfirm) {
    line = {{"op", "confirm"},
            {"id", p.id},
            {"workspace", opts_.workspace},
            {"request", p.request},
            {"fingerprint", p.fingerprint}};
  } else {
    const char* ask = p.q.ask == vault::ConsentAsk::kAlways ? "always" : "once";
    line = {{"op", "consent"},
            {"id", p.id},
            {"kind", p.kind},
            {"workspace", opts_.workspace},
            {"cred", p.q.credential},
            {"host", p.q.host},
            {"method", p.q.method},
            {"path", p.q.path},
            {"ask", p.kind == "ssh" ? "always" : ask},
            {"grants", GrantsFor(p.Timed())},
            {"timeout_s",
             std::chrono::duration_cast<std::chrono::seconds>(opts_.timeout).count()}};
    if (p.kind == "ssh") {
      line["request"] = p.request;
      line["fingerprint"] = p.fingerprint;
    }
  }
  if (!l.conn || !l.conn->Send(line).ok()) {
    // A listener that cannot take a line is hung up (its thread then leaves).
    if (l.conn) shutdown(l.conn->fd(), SHUT_RDWR);
    return false;
  }
  l.open.insert(p.id);
  return true;
}

std::shared_ptr<ConsentBroker::Pending> ConsentBroker::OpenLocked(std::shared_ptr<Pending> p) {
  p->id = next_id_++;
  p->asked_at = Now();
  p->deadline = p->asked_at + opts_.timeout;
  std::shared_ptr<Listener> newest_ssh;
  for (const auto& who : listeners_) {
    if (who->protocol == Protocol::kSshConfirm) {
      if (p->kind == "ssh") newest_ssh = who;
      continue;
    }
    if (SendQuestionLocked(*who, *p)) ++p->listening;
  }
  if (newest_ssh && SendQuestionLocked(*newest_ssh, *p)) ++p->listening;
  if (p->listening == 0) {
    p->answer = ConsentAnswer{false, "refused", "no listener", 0};
    return p;
  }
  pending_[p->id] = p;
  return p;
}

void ConsentBroker::ResolveLocked(const std::shared_ptr<Pending>& p, ConsentAnswer answer) {
  if (p->answer) return;
  p->answer = answer;
  pending_.erase(p->id);
  for (const auto& who : listeners_) {
    if (who->open.erase(p->id) == 0) continue;
    if (who->protocol != Protocol::kConsent || !who->conn) continue;
    (void)who->conn->Send({{"op", "consent-done"},
                           {"id", p->id},
                           {"decision", answer.decision},
                           {"by", answer.by},
                           {"allowed", answer.allowed}});
  }
  std::string what = p->kind == "ssh" ? "ssh signature (" + p->request + ")"
                                      : p->q.credential + " for " + p->q.method + " " +
                                            p->q.host + p->q.path;
  Log("consent: " + what + ": " + (answer.allowed ? "allowed, " : "refused, ") +
      answer.decision + " (" + answer.by + ")");
  if (p->wake) {
    std::function<void()> wake = std::move(p->wake);
    p->wake = nullptr;
    wake();  // only posts to the waiter's loop (ConsentTicket::OnDecided)
  }
  cv_.notify_all();
}

void ConsentBroker::ExpireLocked(const std::shared_ptr<Pending>& p) {
  if (p->answer || Now() < p->deadline) return;
  ResolveLocked(p, {false, "refused",
                    "no answer within " +
                        std::to_string(
                            std::chrono::duration_cast<std::chrono::seconds>(opts_.timeout).count()) +
                        " s",
                    0});
}

void ConsentBroker::ExpireDue() {
  std::lock_guard<std::mutex> l(mu_);
  std::vector<std::shared_ptr<Pending>> all;
  for (const auto& [id, p] : pending_) all.push_back(p);
  for (const auto& p : all) ExpireLocked(p);
}

void ConsentBroker::ApplyLocked(const std::shared_ptr<Pending>& p, Grant grant,
                                const std::string& by) {
  if (grant == Grant::kDeny) {
    ResolveLocked(p, {false, "deny", by, 0});
    return;
  }
  if (grant == Grant::kRequest || !p->Timed()) {
    // An `always` credential and an SSH signature take no grant: any yes is this request only.
    ResolveLocked(p, {true, "request", by, 0});
    return;
  }
  GrantRecord rec{grant, by, std::nullopt};
  int64_t secs = -1;
  if (auto len = GrantLength(grant)) {
    rec.expires = Now() + *len;
    secs = len->count();
  }
  grants_[p->q.credential] = rec;
  Log("consent: " + p->q.credential + " granted " + GrantName(grant) + " by " + by);
  ResolveLocked(p, {true, GrantName(grant), by, secs});
  // Other uses of the same credential waiting now are covered by the new grant.
  std::vector<std::shared_ptr<Pending>> covered;
  for (const auto& [id, other] : pending_) {
    if (other->Timed() && other->q.credential == p->q.credential) covered.push_back(other);
  }
  for (const auto& other : covered) {
    ResolveLocked(other, {true, "grant", by + " (" + GrantName(grant) + ")", secs});
  }
}

void ConsentBroker::WithdrawLocked(uint64_t id) {
  auto it = pending_.find(id);
  if (it == pending_.end()) return;
  std::shared_ptr<Pending> p = it->second;
  ResolveLocked(p, {false, "refused", "withdrawn (the request went away)", 0});
}

void ConsentBroker::ListenerGoneLocked(const std::shared_ptr<Listener>& who) {
  std::vector<std::shared_ptr<Pending>> orphans;
  for (uint64_t id : who->open) {
    auto it = pending_.find(id);
    if (it == pending_.end()) continue;
    if (--it->second->listening <= 0) orphans.push_back(it->second);
  }
  who->open.clear();
  for (const auto& p : orphans) ResolveLocked(p, {false, "refused", "the listener left", 0});
}

std::shared_ptr<proxy::ConsentTicket> ConsentBroker::Ask(const proxy::ConsentQuestion& question) {
  std::lock_guard<std::mutex> l(mu_);
  auto refuse = [&](const std::string& why) {
    Log("consent: " + question.credential + " for " + Bounded(question.method) + " " +
        Bounded(question.host) + ": refused (" + why + "); run `cloister approve " +
        opts_.workspace + "` on the host to be asked");
    return std::make_shared<DecidedTicket>(ConsentAnswer{false, "refused", why, 0});
  };
  if (stopped_) return refuse("stopping");
  if (question.ask == vault::ConsentAsk::kOnce) {
    if (auto granted = GrantCoversLocked(question.credential)) {
      return std::make_shared<DecidedTicket>(*granted);
    }
  }
  auto p = std::make_shared<Pending>();
  p->kind = "cred";
  p->q = {Bounded(question.credential), Bounded(question.host), Bounded(question.method),
          Bounded(question.path), question.ask};
  p = OpenLocked(std::move(p));
  if (p->answer) return refuse(p->answer->by);
  Log("consent: " + p->q.credential + " for " + p->q.method + " " + p->q.host + p->q.path +
      " waits for a decision (question " + std::to_string(p->id) + ")");
  return std::make_shared<Ticket>(weak_from_this(), p);
}

ConsentAnswer ConsentBroker::AskAndWait(const SshQuestion& question) {
  std::unique_lock<std::mutex> l(mu_);
  if (stopped_) return {false, "refused", "stopping", 0};
  auto p = std::make_shared<Pending>();
  p->kind = "ssh";
  p->q.credential = "ssh";
  p->q.ask = vault::ConsentAsk::kAlways;
  p->request = Bounded(question.request);
  p->fingerprint = Bounded(question.fingerprint);
  p = OpenLocked(std::move(p));
  // Poll the clock (it may be injected) as well as waiting for the answer.
  while (!p->answer) {
    cv_.wait_for(l, std::chrono::milliseconds(50), [&] { return p->answer.has_value(); });
    ExpireLocked(p);
  }
  return *p->answer;
}

void ConsentBroker::ServeListener(LineConn& conn, const ListenerOptions& options) {
  auto me = std::make_shared<Listener>();
  me->conn = &conn;
  me->protocol = options.protocol;
  me->by = Who(options.client, PeerPid(conn.fd()));
  // A listener that stops reading must not block the proxy (which asks under the lock): a line
  // it cannot take within a second hangs it up.
  timeval tv{1, 0};
  setsockopt(conn.fd(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  const bool ssh = options.protocol == Protocol::kSshConfirm;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (stopped_) {
      (void)conn.Send(ErrorReply(Error(ErrorCode::kUnavailable, "the workspace is stopping")));
      return;
    }
    // The hello is sent under the lock, before any question can be (questions need the lock).
    json hello = ssh ? options.hello
                     : json{{"ok", true}, {"workspace", opts_.workspace}, {"grants", GrantsFor(true)}};
    if (!conn.Send(hello).ok()) return;
    listeners_.push_back(me);
    if (!ssh) {
      // What already waits (a dashboard opened after the request).
      for (const auto& [id, p] : pending_) {
        if (SendQuestionLocked(*me, *p)) ++p->listening;
      }
    }
  }
  Log(ssh ? "ssh-confirm: a listener connected" : "consent: a listener connected (" + me->by + ")");
  while (true) {
    // SECURITY: bounded line parser; anything but a valid answer refuses.
    Result<json> msg = conn.Read(Clock::now() + std::chrono::hours(24));
    std::lock_guard<std::mutex> l(mu_);
    if (!msg.ok()) {
      if (msg.error().message().find("no answer in time") != std::string::npos) continue;
      if (!ssh && msg.error().message().find("malformed message") != std::string::npos) {
        // Garbage on a consent listener: every question open on it is refused.
        std::vector<std::shared_ptr<Pending>> open;
        for (uint64_t id : me->open) {
          if (auto it = pending_.find(id); it != pending_.end()) open.push_back(it->second);
        }
        for (const auto& p : open) ResolveLocked(p, {false, "refused", "garbage answer", 0});
        continue;
      }
      break;  // hung up, too long a line, or Stop() shut the socket down
    }
    std::optional<uint64_t> id = QuestionId(*msg);
    bool has_id = id.has_value();
    std::optional<Grant> grant;
    if (ssh) {
      auto allow = msg->find("allow");
      if (allow != msg->end() && allow->is_boolean()) {
        grant = allow->get<bool>() ? Grant::kRequest : Grant::kDeny;
      }
    } else {
      grant = ParseGrant(JsonString(*msg, "grant"));
    }
    std::vector<std::shared_ptr<Pending>> targets;
    if (has_id) {
      uint64_t n = *id;
      auto it = pending_.find(n);
      if (it == pending_.end() || !me->open.count(n)) continue;  // late, or not asked here
      targets.push_back(it->second);
    } else {
      for (uint64_t n : me->open) {
        if (auto it = pending_.find(n); it != pending_.end()) targets.push_back(it->second);
      }
    }
    for (const auto& p : targets) {
      if (grant && has_id) ApplyLocked(p, *grant, me->by);
      else ResolveLocked(p, {false, "refused", "garbage answer", 0});
    }
  }
  {
    std::lock_guard<std::mutex> l(mu_);
    me->conn = nullptr;
    listeners_.remove(me);
    ListenerGoneLocked(me);
  }
  Log(ssh ? "ssh-confirm: a listener left" : "consent: a listener left (" + me->by + ")");
}

json ConsentBroker::List() {
  std::lock_guard<std::mutex> l(mu_);
  const auto now = Now();
  // Questions whose time is up are refused now, and expired grants dropped.
  std::vector<std::shared_ptr<Pending>> late;
  for (const auto& [id, p] : pending_) {
    if (now >= p->deadline) late.push_back(p);
  }
  for (const auto& p : late) ResolveLocked(p, {false, "refused", "no answer in time", 0});
  std::vector<std::string> creds;
  for (const auto& [cred, g] : grants_) creds.push_back(cred);
  for (const auto& cred : creds) (void)GrantCoversLocked(cred);

  auto secs = [](Clock::duration d) {
    return std::chrono::duration_cast<std::chrono::seconds>(d).count();
  };
  json pending = json::array();
  for (const auto& [id, p] : pending_) {
    pending.push_back({{"id", id},
                       {"kind", p->kind},
                       {"cred", p->q.credential},
                       {"host", p->q.host},
                       {"method", p->q.method},
                       {"path", p->q.path},
                       {"ask", p->q.ask == vault::ConsentAsk::kAlways ? "always" : "once"},
                       {"request", p->request},
                       {"age_s", secs(now - p->asked_at)},
                       {"expires_in_s", secs(p->deadline - now)},
                       {"grants", GrantsFor(p->Timed())}});
  }
  json grants = json::array();
  for (const auto& [cred, g] : grants_) {
    json item = {{"cred", cred}, {"grant", GrantName(g.grant)}, {"by", g.by}};
    if (g.expires) item["expires_in_s"] = secs(*g.expires - now);
    grants.push_back(item);
  }
  int n = static_cast<int>(listeners_.size());
  return {{"ok", true}, {"workspace", opts_.workspace}, {"listeners", n},
          {"pending", pending}, {"grants", grants}};
}

json ConsentBroker::Answer(uint64_t id, Grant grant, const std::string& client, int peer_pid) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = pending_.find(id);
  if (it != pending_.end() && Now() >= it->second->deadline) {
    ResolveLocked(it->second, {false, "refused", "no answer in time", 0});
    it = pending_.end();
  }
  if (it == pending_.end()) {
    return ErrorReply(Error(ErrorCode::kNotFound, "no pending question " + std::to_string(id),
                            "it was answered, withdrawn or timed out; `consent-list` shows what "
                            "waits"));
  }
  std::shared_ptr<Pending> p = it->second;
  ApplyLocked(p, grant, Who(client, peer_pid));
  return {{"ok", true}, {"decision", p->answer ? p->answer->decision : GrantName(grant)}};
}

json ConsentBroker::Revoke(const std::string& credential) {
  std::lock_guard<std::mutex> l(mu_);
  size_t n = 0;
  if (credential == "*") {
    n = grants_.size();
    grants_.clear();
  } else {
    n = grants_.erase(credential);
  }
  Log("consent: revoked " + std::to_string(n) + " grant(s) of " +
      (credential == "*" ? std::string("every credential") : Bounded(credential)));
  return {{"ok", true}, {"revoked", n}};
}

json ConsentBroker::HandleRequest(const json& request, int peer_pid) {
  std::string op = JsonString(request, "op");
  if (op == kConsentListOp) return List();
  if (op == kConsentRevokeOp) {
    std::string cred = JsonString(request, "cred");
    if (cred.empty()) {
      return ErrorReply(Error(ErrorCode::kInvalidArgument, "consent-revoke needs \"cred\"",
                              "a credential id (`cloister cred ls NAME`) or \"*\""));
    }
    return Revoke(cred);
  }
  if (op == kConsentAnswerOp) {
    std::optional<uint64_t> id = QuestionId(request);
    std::optional<Grant> grant = ParseGrant(JsonString(request, "grant"));
    if (!id || !grant) {
      return ErrorReply(Error(ErrorCode::kInvalidArgument,
                              "consent-answer needs a numeric \"id\" and a \"grant\"",
                              "grant: request, 5m, 1h, vm or deny"));
    }
    std::string client = JsonString(request, "client");
    return Answer(*id, *grant, client.empty() ? "ui" : client, peer_pid);
  }
  return ErrorReply(Error(ErrorCode::kInvalidArgument, "unknown consent request '" +
                                                           Bounded(op) + "'"));
}

void ConsentBroker::EndVmGrants() {
  std::lock_guard<std::mutex> l(mu_);
  std::erase_if(grants_, [](const auto& kv) { return !kv.second.expires.has_value(); });
}

void ConsentBroker::Stop() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stopped_ = true;
    std::vector<std::shared_ptr<Pending>> all;
    for (const auto& [id, p] : pending_) all.push_back(p);
    for (const auto& p : all) ResolveLocked(p, {false, "refused", "stopping", 0});
    grants_.clear();
    for (const auto& who : listeners_) {
      if (who->conn) shutdown(who->conn->fd(), SHUT_RDWR);
    }
  }
  cv_.notify_all();
}

}  // namespace cloister::vm
