#include "ui/consent.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <list>
#include <mutex>
#include <thread>

#include "ui/traffic.h"

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
    int fd = -1;
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
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  bool ok = fd >= 0 && path.size() < sizeof(addr.sun_path);
  if (ok) {
    std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
    ok = connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  }
  const std::string hello = "{\"op\":\"consent-listen\",\"client\":\"ui\"}\n";
  if (ok) ok = send(fd, hello.data(), hello.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(hello.size());
  {
    std::lock_guard<std::mutex> l(mu);
    if (stopping) ok = false;
    c->fd = ok ? fd : -1;
  }
  if (!ok) {
    if (fd >= 0) close(fd);
    std::lock_guard<std::mutex> l(mu);
    c->done = true;
    return;
  }
  std::string buf;
  char chunk[8192];
  for (;;) {
    ssize_t n = recv(fd, chunk, sizeof chunk, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    buf.append(chunk, static_cast<size_t>(n));
    size_t nl;
    while ((nl = buf.find('\n')) != std::string::npos) {
      std::string line = buf.substr(0, nl);
      buf.erase(0, nl + 1);
      nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
      std::lock_guard<std::mutex> l(mu);
      if (auto q = ParseConsentQuestion(line)) {
        int64_t id = (*q)["id"];
        if (!c->questions.count(id) && c->questions.size() < kMaxConsentQuestions) {
          (*q)["workspace"] = c->workspace;
          c->questions[id] = *q;
          c->order.push_back(id);
        }
      } else if (j.is_object() && j.value("op", nlohmann::json()) == "consent-done" &&
                 j.contains("id") && j["id"].is_number_integer()) {
        int64_t id = j["id"];
        c->questions.erase(id);
        c->order.erase(std::remove(c->order.begin(), c->order.end(), id), c->order.end());
      }
    }
    // SECURITY: a peer that never ends a line does not grow our memory.
    if (buf.size() > kMaxConsentLine) break;
  }
  std::lock_guard<std::mutex> l(mu);
  close(fd);
  c->fd = -1;
  c->questions.clear();
  c->order.clear();
  c->done = true;
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
      if (c.fd >= 0) shutdown(c.fd, SHUT_RDWR);
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
    if (c.workspace != workspace || c.fd < 0) continue;
    auto q = c.questions.find(id);
    if (q == c.questions.end()) break;
    bool offered = false;
    for (const auto& g : q->second["grants"]) offered |= g == grant;
    if (!offered) {
      return Error(ErrorCode::kInvalidArgument,
                   "question " + std::to_string(id) + " does not offer grant '" + grant + "'");
    }
    std::string line = nlohmann::json{{"id", id}, {"grant", grant}}.dump() + "\n";
    if (send(c.fd, line.data(), line.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(line.size())) {
      return ErrnoError("answering the consent question of " + workspace, errno);
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
