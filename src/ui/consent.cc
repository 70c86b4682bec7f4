#include "ui/consent.h"

#include <sys/socket.h>

#include <algorithm>
#include <condition_variable>
#include <list>
#include <mutex>
#include <thread>

#include "supervisor/consent.h"
#include "supervisor/control.h"

namespace cloister::ui {

bool ValidGrant(std::string_view g) {
  return g == "request" || g == "5m" || g == "1h" || g == "vm" || g == "deny";
}

namespace {

std::string Clean(const nlohmann::json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_string()) return "";
  std::string out;
  for (char c : it->get_ref<const std::string&>()) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) continue;
    out += c;
    if (out.size() >= kMaxConsentField) break;
  }
  return out;
}

}  // namespace

std::optional<nlohmann::json> ParseConsentQuestion(std::string_view line) {
  if (line.size() > kMaxConsentLine) return std::nullopt;
  nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  return ConsentQuestionFrom(j);
}

std::optional<nlohmann::json> ConsentQuestionFrom(const nlohmann::json& j) {
  if (!j.is_object() || j.value("op", nlohmann::json()) != "consent") return std::nullopt;
  auto id = j.find("id");
  if (id == j.end() || !id->is_number_integer() || id->get<int64_t>() < 0) return std::nullopt;
  nlohmann::json grants = nlohmann::json::array();
  if (auto g = j.find("grants"); g != j.end() && g->is_array()) {
    for (const auto& x : *g) {
      if (x.is_string() && ValidGrant(x.get<std::string>()) && grants.size() < 5) grants.push_back(x);
    }
  }
  if (grants.empty()) grants = {"request", "deny"};
  int64_t timeout = 0;
  if (auto t = j.find("timeout_s"); t != j.end() && t->is_number_integer()) {
    timeout = std::clamp<int64_t>(t->get<int64_t>(), 0, 86400);
  }
  return nlohmann::json{{"id", id->get<int64_t>()},    {"kind", Clean(j, "kind")},
                        {"cred", Clean(j, "cred")},     {"host", Clean(j, "host")},
                        {"method", Clean(j, "method")}, {"path", Clean(j, "path")},
                        {"request", Clean(j, "request")},
                        {"fingerprint", Clean(j, "fingerprint")},
                        {"ask", Clean(j, "ask")},       {"grants", grants},
                        {"timeout_s", timeout}};
}

struct ConsentDesk::Impl {
  struct Conn {
    std::string workspace;
    // The listener connection (the control protocol's bounded line reader, supervisor/control.h).
    // Set and reset under mu by the connection's thread; Answer sends on it under mu while that
    // thread reads (a socket takes one reader and one writer at once).
    std::unique_ptr<vm::LineConn> conn;
    std::thread thread;
    bool done = false;
    std::map<int64_t, nlohmann::json> questions;  // by id
    std::vector<int64_t> order;
  };
  Sockets sockets;
  std::chrono::milliseconds rescan;
  std::mutex mu;
  std::condition_variable cv;
  bool stopping = false;
  std::list<Conn> conns;
  std::thread manager;

  void Manage();
  void Listen(Conn* c, std::string path);
};

void ConsentDesk::Impl::Listen(Conn* c, std::string path) {
  auto finish = [this, c] {
    std::lock_guard<std::mutex> l(mu);
    c->conn.reset();
    c->questions.clear();
    c->order.clear();
    c->done = true;
  };
  Result<int> fd = vm::ConnectUnix(path);
  if (!fd.ok()) return finish();
  auto owned = std::make_unique<vm::LineConn>(*fd);
  vm::LineConn* conn = owned.get();
  {
    std::lock_guard<std::mutex> l(mu);
    if (stopping) return;  // `owned` closes it; the destructor joins this thread
    c->conn = std::move(owned);
  }
  // A listener never times out on its own: the supervisor's hang-up or our shutdown ends it.
  auto forever = [] { return std::chrono::steady_clock::now() + std::chrono::hours(24); };
  // SECURITY: the supervisor must accept the listener ({"ok":true}); anything else ends it, and a
  // line that is not a bounded JSON object (LineConn) ends the connection (its questions go).
  if (!conn->Send({{"op", vm::kConsentListenOp}, {"client", "ui"}}).ok()) return finish();
  Result<nlohmann::json> hello = conn->Read(forever());
  if (!hello.ok() || hello->value("ok", nlohmann::json()) != true) return finish();
  for (;;) {
    Result<nlohmann::json> line = conn->Read(forever());
    if (!line.ok()) break;
    const nlohmann::json& j = *line;
    std::lock_guard<std::mutex> l(mu);
    if (auto q = ConsentQuestionFrom(j)) {
      int64_t id = (*q)["id"];
      if (!c->questions.count(id) && c->questions.size() < kMaxConsentQuestions) {
        (*q)["workspace"] = c->workspace;
        c->questions[id] = *q;
        c->order.push_back(id);
      }
    } else if (vm::JsonString(j, "op") == "consent-done" && j.contains("id") &&
               j["id"].is_number_integer()) {
      int64_t id = j["id"];
      c->questions.erase(id);
      c->order.erase(std::remove(c->order.begin(), c->order.end(), id), c->order.end());
    }
  }
  finish();
}

void ConsentDesk::Impl::Manage() {
  std::unique_lock<std::mutex> l(mu);
  while (!stopping) {
    // Reap finished connections, then connect to the workspaces that have none.
    for (auto it = conns.begin(); it != conns.end();) {
      if (it->done) {
        std::thread t = std::move(it->thread);
        it = conns.erase(it);
        l.unlock();
        if (t.joinable()) t.join();
        l.lock();
      } else {
        ++it;
      }
    }
    l.unlock();
    std::map<std::string, std::string> want = sockets ? sockets() : std::map<std::string, std::string>{};
    l.lock();
    for (const auto& entry : want) {
      // Named copies, not structured bindings: clang 14 (the fuzz build) cannot capture those.
      const std::string& name = entry.first;
      const std::string path = entry.second;
      bool have = std::any_of(conns.begin(), conns.end(),
                              [&](const Conn& c) { return c.workspace == name; });
      if (have || stopping) continue;
      conns.emplace_back();
      Conn* c = &conns.back();
      c->workspace = name;
      c->thread = std::thread([this, c, path] { Listen(c, path); });
    }
    cv.wait_for(l, rescan, [this] { return stopping; });
  }
}

ConsentDesk::ConsentDesk(Sockets sockets, std::chrono::milliseconds rescan)
    : impl_(std::make_unique<Impl>()) {
  impl_->sockets = std::move(sockets);
  impl_->rescan = rescan;
  impl_->manager = std::thread([this] { impl_->Manage(); });
}

ConsentDesk::~ConsentDesk() {
  {
    std::lock_guard<std::mutex> l(impl_->mu);
    impl_->stopping = true;
    for (auto& c : impl_->conns) {
      if (c.conn) shutdown(c.conn->fd(), SHUT_RDWR);  // wakes its thread's read
    }
  }
  impl_->cv.notify_all();
  if (impl_->manager.joinable()) impl_->manager.join();
  for (auto& c : impl_->conns) {
    if (c.thread.joinable()) c.thread.join();
  }
}

nlohmann::json ConsentDesk::Pending() {
  std::lock_guard<std::mutex> l(impl_->mu);
  nlohmann::json out = nlohmann::json::array();
  for (const auto& c : impl_->conns) {
    for (int64_t id : c.order) out.push_back(c.questions.at(id));
  }
  return out;
}

Status ConsentDesk::Answer(const std::string& workspace, int64_t id, const std::string& grant) {
  std::lock_guard<std::mutex> l(impl_->mu);
  for (auto& c : impl_->conns) {
    if (c.workspace != workspace || !c.conn) continue;
    auto q = c.questions.find(id);
    if (q == c.questions.end()) break;
    bool offered = false;
    for (const auto& g : q->second["grants"]) offered |= g == grant;
    if (!offered) {
      return Error(ErrorCode::kInvalidArgument,
                   "question " + std::to_string(id) + " does not offer grant '" + grant + "'");
    }
    Status sent = c.conn->Send({{"id", id}, {"grant", grant}});
    if (!sent.ok()) {
      return Error(sent.error().code(),
                   "answering the consent question of " + workspace + ": " + sent.error().message(),
                   "the workspace's supervisor went away; the question is refused");
    }
    // Closed here at once; the supervisor's consent-done confirms it to every listener.
    c.questions.erase(q);
    c.order.erase(std::remove(c.order.begin(), c.order.end(), id), c.order.end());
    return OkStatus();
  }
  return Error(ErrorCode::kNotFound,
               "no open consent question " + std::to_string(id) + " of " + workspace,
               "it was answered elsewhere or timed out (refused); the guest's next request asks "
               "again");
}

}  // namespace cloister::ui
