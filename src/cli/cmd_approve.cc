// cloister approve [NAME]: the terminal that decides a running workspace's consent questions
// (supervisor/consent.h): uses of credentials with `cred policy NAME CRED --ask once|always`, and
// SSH signatures of workspaces with `ssh-policy NAME --confirm on` (`ssh-confirm` is the SSH-only
// form of this verb).
//
// Registers as a consent listener on each workspace's control socket ("consent-listen"); for
// each question prints it on stderr and reads the answer from stdin (the user's terminal):
// r/y = this request, 5 = 5 minutes, 1 = 1 hour, v = until the VM stops, anything else = deny.
// Without NAME it listens to every running workspace of the store. Runs until every VM stops
// (exit 0), stdin ends (the pending question is refused), or Ctrl-C. `--list` prints what waits
// and the live grants instead (`--json` for scripts).
//
// SECURITY: question text comes from the guest (host, method, path, the SSH request): no control
// characters reach the terminal. Fail closed: with no listener, every question is refused.
#include <sys/socket.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <set>
#include <thread>

#include "base/json_util.h"
#include "base/strings.h"
#include "base/terminal_text.h"
#include "cli/cli.h"
#include "cli/commands.h"
#include "store/store.h"
#include "supervisor/consent.h"
#include "supervisor/control.h"

namespace cloister::cli {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

// SECURITY: guest text (base/terminal_text.h), at most 200 bytes of it.
std::string Printable(const std::string& s) { return TerminalSafe(std::string_view(s).substr(0, 200)); }

// The grant an answer typed at the prompt means; deny unless it is one of the offered ones.
std::string GrantFromAnswer(const std::string& typed, const json& offered) {
  std::string a = ToLower(Trim(typed));
  std::string g = "deny";
  if (a == "r" || a == "y" || a == "yes" || a == "request") g = "request";
  else if (a == "5" || a == "5m") g = "5m";
  else if (a == "1" || a == "1h") g = "1h";
  else if (a == "v" || a == "vm") g = "vm";
  if (offered.is_array()) {
    for (const auto& o : offered) {
      if (o.is_string() && o.get<std::string>() == g) return g;
    }
  }
  return "deny";
}

std::string Prompt(const std::string& ws, const json& q) {
  json grants = q.contains("grants") ? q["grants"] : json::array();
  bool timed = grants.is_array() && grants.size() > 2;
  std::string what;
  if (vm::JsonString(q, "kind") == "ssh") {
    what = Printable(vm::JsonString(q, "request")) + " with its key " +
           Printable(vm::JsonString(q, "fingerprint"));
  } else {
    what = "use " + Printable(vm::JsonString(q, "cred")) + " for " +
           Printable(vm::JsonString(q, "method")) + " " + Printable(vm::JsonString(q, "host")) +
           Printable(vm::JsonString(q, "path"));
  }
  std::string p = "\a" + ws + " asks to " + what + ". ";
  if (timed) {
    p += "Allow? [r] this request, [5] 5 minutes, [1] 1 hour, [v] until the VM stops, [N] deny: ";
  } else {
    p += "Allow this request? [y/N] ";
  }
  return p;
}

struct Event {
  std::string ws;
  json line;      // a question or a consent-done
  bool ended = false;
};

class Listening {
 public:
  void Push(Event e) {
    {
      std::lock_guard<std::mutex> l(mu_);
      events_.push_back(std::move(e));
    }
    cv_.notify_all();
  }
  Event Pop() {
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait(l, [&] { return !events_.empty(); });
    Event e = std::move(events_.front());
    events_.pop_front();
    return e;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Event> events_;
};

struct Connection {
  std::string ws;
  std::unique_ptr<vm::LineConn> conn;
  std::thread reader;
};

// Connects `name` as a consent listener; nullptr + error when it is not running.
Result<std::unique_ptr<vm::LineConn>> Register(Store& store, const std::string& name) {
  Result<int> fd = vm::ConnectUnix(store.Paths(name).supervisor_socket);
  if (!fd.ok()) {
    return Error(ErrorCode::kFailedPrecondition, name + " is not running: nothing asks for consent",
                 "`cloister start " + name + "` (grants live only while its VM runs)");
  }
  auto conn = std::make_unique<vm::LineConn>(*fd);
  RETURN_IF_ERROR(conn->Send({{"op", vm::kConsentListenOp}, {"client", "approve"}}));
  ASSIGN_OR_RETURN(json hello, conn->Read(Clock::now() + std::chrono::seconds(10)));
  if (auto ok = hello.find("ok"); ok == hello.end() || !ok->is_boolean() || !ok->get<bool>()) {
    return vm::ErrorFromReply(hello);
  }
  return conn;
}

Status List(Cli& cli, Store& store, const std::vector<std::string>& names, bool as_json) {
  json all = json::array();
  for (const std::string& name : names) {
    Result<json> r = vm::ControlRequest(store.Paths(name).supervisor_socket,
                                        {{"op", vm::kConsentListOp}}, std::chrono::seconds(10));
    if (!r.ok()) continue;  // not running: nothing waits, no grants
    all.push_back(*r);
  }
  if (as_json) {
    cli.PrintJson({{"workspaces", all}});
    return OkStatus();
  }
  if (all.empty()) {
    cli.out() << "No running workspace: nothing waits for consent\n";
    return OkStatus();
  }
  for (const json& w : all) {
    std::string ws = vm::JsonString(w, "workspace");
    for (const json& p : w.value("pending", json::array())) {
      cli.out() << ws << "\twaiting\t#" << JsonInt<uint64_t>(p, "id", 0) << "\t" << Printable(vm::JsonString(p, "cred"))
                << "\t" << Printable(vm::JsonString(p, "method")) << " "
                << Printable(vm::JsonString(p, "host")) << Printable(vm::JsonString(p, "path"))
                << Printable(vm::JsonString(p, "request")) << "\n";
    }
    for (const json& g : w.value("grants", json::array())) {
      cli.out() << ws << "\tgranted\t" << Printable(vm::JsonString(g, "cred")) << "\t"
                << vm::JsonString(g, "grant") << "\t";
      if (g.contains("expires_in_s")) cli.out() << JsonInt<int64_t>(g, "expires_in_s", 0) << " s left";
      else cli.out() << "until the VM stops";
      cli.out() << "\t" << Printable(vm::JsonString(g, "by")) << "\n";
    }
    if (w.value("pending", json::array()).empty() && w.value("grants", json::array()).empty()) {
      cli.out() << ws << "\tnothing waits, no grants\n";
    }
  }
  return OkStatus();
}

Status Approve(Cli& cli, const std::string& name, bool list, bool as_json) {
  ASSIGN_OR_RETURN(std::unique_ptr<Store> store, Store::Open(cli.StoreRoot()));
  std::vector<std::string> names;
  if (!name.empty()) {
    ASSIGN_OR_RETURN(WorkspaceConfig config, store->LoadConfig(name));
    (void)config;
    names.push_back(name);
  } else {
    ASSIGN_OR_RETURN(std::vector<WorkspaceSummary> all, store->List());
    for (const auto& w : all) names.push_back(w.name);
  }
  if (list) return List(cli, *store, names, as_json);

  Listening events;
  std::vector<Connection> conns;
  for (const std::string& n : names) {
    Result<std::unique_ptr<vm::LineConn>> c = Register(*store, n);
    if (!c.ok()) {
      if (!name.empty()) return c.error();
      continue;  // every running workspace: a stopped one is skipped
    }
    conns.push_back({n, std::move(c).value(), {}});
  }
  if (conns.empty()) {
    return Error(ErrorCode::kFailedPrecondition, "no workspace is running: nothing asks for consent",
                 "`cloister start NAME`, then `cloister approve NAME`");
  }
  for (Connection& c : conns) {
    vm::LineConn* conn = c.conn.get();
    std::string ws = c.ws;
    c.reader = std::thread([conn, ws, &events] {
      while (true) {
        Result<json> q = conn->Read(Clock::now() + std::chrono::hours(24));
        if (!q.ok()) {
          if (q.error().message().find("no answer in time") != std::string::npos) continue;
          events.Push({ws, {}, true});
          return;
        }
        events.Push({ws, std::move(q).value(), false});
      }
    });
  }
  std::string ws_list;
  for (const Connection& c : conns) ws_list += (ws_list.empty() ? "" : ", ") + c.ws;
  cli.err() << "cloister: answering consent questions of " << ws_list << "; Ctrl-C to stop\n"
            << std::flush;

  Status result = OkStatus();
  size_t live = conns.size();
  std::set<std::pair<std::string, uint64_t>> done;
  while (live > 0) {
    Event e = events.Pop();
    if (e.ended) {
      cli.err() << "cloister: " << e.ws << " stopped; no more requests\n" << std::flush;
      --live;
      continue;
    }
    std::string op = vm::JsonString(e.line, "op");
    auto id = e.line.find("id");
    if (id == e.line.end() || !id->is_number_unsigned()) continue;
    uint64_t n = id->get<uint64_t>();
    if (op == "consent-done") {
      done.insert({e.ws, n});
      continue;
    }
    if (op != "consent" || done.count({e.ws, n})) continue;  // decided before we got to it
    cli.err() << Prompt(e.ws, e.line) << std::flush;
    std::string typed;
    bool got = static_cast<bool>(std::getline(cli.in(), typed));
    std::string grant = got ? GrantFromAnswer(typed, e.line["grants"]) : "deny";
    for (Connection& c : conns) {
      if (c.ws == e.ws) (void)c.conn->Send({{"id", n}, {"grant", grant}});
    }
    cli.err() << (grant == "deny" ? "denied\n"
                  : grant == "request" ? "allowed (this request)\n"
                  : grant == "vm" ? "allowed until the VM stops\n"
                                  : "allowed for " + grant + "\n")
              << std::flush;
    if (!got) {
      result = Error(ErrorCode::kCancelled, "stdin ended: refused the request and stopped listening",
                     "run `cloister approve " + (name.empty() ? std::string("NAME") : name) +
                         "` in a terminal");
      break;
    }
  }
  for (Connection& c : conns) shutdown(c.conn->fd(), SHUT_RDWR);
  for (Connection& c : conns) {
    if (c.reader.joinable()) c.reader.join();
  }
  return result;
}

}  // namespace

void AddApproveCommand(CLI::App& app, Cli& cli) {
  struct Opts {
    std::string name;
    bool list = false, json = false;
  };
  auto o = std::make_shared<Opts>();
  auto* cmd = app.add_subcommand(
      "approve",
      "Decide a running workspace's consent questions on this terminal: uses of credentials with "
      "`cloister cred policy NAME CRED --ask once|always`, and SSH signatures with `ssh-policy "
      "--confirm on`. Answers: this request, 5 minutes, 1 hour, until the VM stops, or deny. "
      "Unanswered questions are refused");
  cmd->add_option("NAME", o->name, "Workspace (default: every running workspace)");
  cmd->add_flag("--list", o->list, "Print the waiting questions and live grants, then exit");
  cmd->add_flag("--json", o->json, "With --list: print as JSON");
  cmd->callback([&cli, o] {
    if (Status st = Approve(cli, o->name, o->list, o->json); !st.ok()) cli.Fail(st.error());
  });
}

}  // namespace cloister::cli
