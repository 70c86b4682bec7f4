// cloister trace ls|summary|leaks NAME: the proxy's per-workspace request log (src/proxy/trace.h).
#include <iomanip>
#include <sstream>

#include "base/terminal_text.h"
#include "cli/cli.h"
#include "cli/commands.h"
#include "proxy/trace.h"
#include "store/store.h"

namespace cloister::cli {
namespace {

// The workspace's trace log (store/layout.h: kTraceLogFile), through the store. Read only: the
// proxy appends whole lines with O_APPEND, so no lock is needed to read it.
Result<std::string> TraceFile(Cli& cli, const std::string& name) {
  ASSIGN_OR_RETURN(std::unique_ptr<Store> store, Store::Open(cli.StoreRoot()));
  ASSIGN_OR_RETURN(WorkspaceConfig config, store->LoadConfig(name));
  (void)config;
  return store->Paths(name).trace_log;
}

std::string Time(int64_t ms) {
  std::time_t t = static_cast<std::time_t>(ms / 1000);
  std::tm tm{};
  gmtime_r(&t, &tm);
  std::ostringstream o;
  o << std::put_time(&tm, "%Y-%m-%dT%H:%M:%SZ");
  return o.str();
}

std::string Leaks(const proxy::TraceRecord& r) {
  std::string s;
  for (const auto& l : r.leaks) {
    if (!s.empty()) s += ",";
    s += l.credential + "@" + l.where + "/" + l.encoding + ":" + l.action;
  }
  return TerminalSafe(s);
}

// SECURITY: the method, host, path and error of a record are the guest's choice (the request it
// sent); they reach the terminal only through TerminalSafe (--json prints them as JSON).
std::string Shown(const std::string& guest_text) { return TerminalSafe(guest_text); }

struct Opts {
  std::string name;
  bool json = false;
  size_t limit = 50;
};

}  // namespace

void AddTraceCommand(CLI::App& app, Cli& cli) {
  auto* trace = app.add_subcommand("trace", "Show what a workspace sent through the egress proxy");
  trace->require_subcommand(1);

  {
    auto o = std::make_shared<Opts>();
    auto* ls = trace->add_subcommand("ls", "List the latest requests (never a secret value)");
    ls->add_option("NAME", o->name, "Workspace")->required();
    ls->add_option("-n,--last", o->limit, "How many of the latest requests (default 50)");
    ls->add_flag("--json", o->json, "Print as JSON");
    ls->callback([&cli, o] {
      auto path = TraceFile(cli, o->name);
      if (!path.ok()) return void(cli.Fail(path.error()));
      auto recs = proxy::ReadTrace(*path, o->limit);
      if (!recs.ok()) return void(cli.Fail(recs.error()));
      if (o->json) {
        nlohmann::json arr = nlohmann::json::array();
        for (const auto& r : *recs) arr.push_back(r.ToJson());
        cli.PrintJson(arr);
        return;
      }
      for (const auto& r : *recs) {
        cli.out() << Time(r.time_ms) << "  " << r.status << "  " << Shown(r.method) << " "
                  << Shown(r.host) << Shown(r.path) << "  " << r.bytes_up << "/" << r.bytes_down << " B  " << std::fixed
                  << std::setprecision(1) << r.latency_ms << " ms";
        if (!r.swaps.empty()) {
          cli.out() << "  swaps=";
          for (size_t i = 0; i < r.swaps.size(); ++i) cli.out() << (i ? "," : "") << Shown(r.swaps[i]);
        }
        if (!r.leaks.empty()) cli.out() << "  LEAK " << Leaks(r);
        if (!r.mode.empty()) cli.out() << "  [" << Shown(r.mode) << "]";
        // A request that ended without a whole response, and why (proxy/trace.h kAbort*).
        if (!r.abort.empty()) cli.out() << "  ABORTED " << Shown(r.abort);
        if (!r.error.empty()) cli.out() << "  (" << Shown(r.error) << ")";
        cli.out() << "\n";
      }
    });
  }

  {
    auto o = std::make_shared<Opts>();
    auto* sum = trace->add_subcommand("summary", "Requests, bytes, latency and swaps per host");
    sum->add_option("NAME", o->name, "Workspace")->required();
    sum->add_flag("--json", o->json, "Print as JSON");
    sum->callback([&cli, o] {
      auto path = TraceFile(cli, o->name);
      if (!path.ok()) return void(cli.Fail(path.error()));
      auto recs = proxy::ReadTrace(*path);
      if (!recs.ok()) return void(cli.Fail(recs.error()));
      auto hosts = proxy::Summarize(*recs);
      if (o->json) {
        nlohmann::json arr = nlohmann::json::array();
        for (const auto& h : hosts) {
          arr.push_back({{"host", h.host}, {"requests", h.requests}, {"errors", h.errors},
                         {"bytes_up", h.bytes_up}, {"bytes_down", h.bytes_down},
                         {"swaps", h.swaps}, {"leaks", h.leaks}, {"p50_ms", h.p50_ms},
                         {"p99_ms", h.p99_ms}});
        }
        cli.PrintJson(arr);
        return;
      }
      cli.out() << "HOST\tREQUESTS\tERRORS\tUP\tDOWN\tSWAPS\tLEAKS\tP50_MS\tP99_MS\n";
      for (const auto& h : hosts) {
        cli.out() << Shown(h.host) << "\t" << h.requests << "\t" << h.errors << "\t" << h.bytes_up << "\t"
                  << h.bytes_down << "\t" << h.swaps << "\t" << h.leaks << "\t" << std::fixed
                  << std::setprecision(1) << h.p50_ms << "\t" << h.p99_ms << "\n";
      }
    });
  }

  {
    auto o = std::make_shared<Opts>();
    auto* leaks = trace->add_subcommand(
        "leaks", "Requests that carried a placeholder where it does not belong (exit 1 if any "
                 "was blocked)");
    leaks->add_option("NAME", o->name, "Workspace")->required();
    leaks->add_flag("--json", o->json, "Print as JSON");
    leaks->callback([&cli, o] {
      auto path = TraceFile(cli, o->name);
      if (!path.ok()) return void(cli.Fail(path.error()));
      auto recs = proxy::ReadTrace(*path);
      if (!recs.ok()) return void(cli.Fail(recs.error()));
      nlohmann::json arr = nlohmann::json::array();
      bool blocked = false;
      for (const auto& r : *recs) {
        if (r.leaks.empty()) continue;
        blocked |= r.blocked;
        arr.push_back(r.ToJson());
      }
      if (o->json) {
        cli.PrintJson(arr);
      } else if (arr.empty()) {
        cli.out() << "No placeholder left its scope in " << o->name << "\n";
      } else {
        for (const auto& r : *recs) {
          if (r.leaks.empty()) continue;
          cli.out() << Time(r.time_ms) << "  " << (r.blocked ? "BLOCKED" : "flagged") << "  "
                    << Shown(r.method) << " " << Shown(r.host) << Shown(r.path) << "  " << Leaks(r)
                    << "\n";
        }
      }
      if (blocked) cli.exit_code = kExitError;
    });
  }
}

}  // namespace cloister::cli
