#include <cstdio>
#include <sstream>

#include "base/subprocess.h"
#include "base/terminal_text.h"
#include "cli/commands.h"
#include "cli/remote.h"
#include "cli/store_verbs.h"
#include "supervisor/browser_vm.h"
#include "supervisor/control.h"
#include "supervisor/launcher.h"

namespace cloister::cli {

namespace {

// `ls --all-contexts`: this machine's `ls --json` and each context's over ssh, one list with the
// context and host of each row. An unreachable context is a row saying so, not a failure of all.
void ListAllContexts(Cli& cli, const std::string& store_flag, bool json) {
  nlohmann::json rows = nlohmann::json::array();
  auto add_rows = [&](const std::string& context, const std::string& host, const std::string& out,
                      const std::string& problem) {
    auto arr = nlohmann::json::parse(out, nullptr, false);
    if (!problem.empty() || !arr.is_array()) {
      rows.push_back({{"context", context}, {"host", host}, {"name", "-"}, {"state", "unknown"},
                      {"problem", problem.empty() ? "unreadable answer" : problem}});
      return;
    }
    for (auto& r : arr) {
      r["context"] = context;
      r["host"] = host;
      rows.push_back(r);
    }
  };
  {
    std::vector<std::string> words = {"cloister"};
    if (!store_flag.empty()) words.insert(words.end(), {"--store", store_flag});
    words.insert(words.end(), {"ls", "--json"});
    std::vector<const char*> argv;
    for (const std::string& w : words) argv.push_back(w.c_str());
    std::ostringstream out, err;
    std::istringstream in;
    int code = RunCli(static_cast<int>(argv.size()), argv.data(), out, err, in);
    add_rows("default", "this machine", out.str(), code == 0 ? "" : err.str());
  }
  auto doc = LoadContexts();
  if (!doc.ok()) {
    cli.Fail(doc.error());
    return;
  }
  for (auto& [name, entry] : (*doc)["contexts"].items()) {
    auto t = ParseRemoteUrl(entry.value("host", ""));
    if (!t.ok()) {
      add_rows(name, entry.value("host", ""), "", t.error().message());
      continue;
    }
    std::string cmd = entry.value("cloister", "");
    if (!cmd.empty()) t->cloister = cmd;
    std::vector<std::string> argv = RemoteSshArgv(*t, {"ls", "--json"}, false);
    argv.insert(argv.begin() + static_cast<long>(SshCommand().size()),
                {"-o", "BatchMode=yes", "-o", "ConnectTimeout=10"});
    RunOptions ro;
    ro.timeout = std::chrono::seconds(60);
    auto r = RunProcess(argv, ro);
    std::string problem;
    if (!r.ok()) problem = r.error().message();
    else if (r->exit_code != 0) problem = "ssh: " + (r->err.empty() ? "exit " + std::to_string(r->exit_code) : r->err);
    while (!problem.empty() && problem.back() == '\n') problem.pop_back();
    add_rows(name, t->url(), r.ok() ? r->out : "", problem);
  }
  if (json) {
    cli.PrintJson(rows);
    return;
  }
  char line[512];
  std::snprintf(line, sizeof(line), "%-14s %-28s %-24s %-10s %s\n", "CONTEXT", "HOST", "NAME", "STATE",
                "NOTE");
  cli.out() << line;
  for (const auto& r : rows) {
    std::string note = r.value("problem", "");
    if (note.empty() && r.value("compromised", false)) note = "COMPROMISED";
    std::snprintf(line, sizeof(line), "%-14s %-28s %-24s %-10s ", r.value("context", "").c_str(),
                  r.value("host", "").c_str(), r.value("name", "").c_str(), r.value("state", "").c_str());
    cli.out() << line << TerminalSafe(note) << "\n";
  }
}

}  // namespace

// The browser VM's state from the supervisor's status answer ("stopped" without one).
static std::string BrowserState(const vm::VmStatus& vs) {
  auto b = vs.info.find("browser");
  if (b == vs.info.end() || !b->is_object()) return "stopped";
  std::string state = vm::JsonString(*b, "state");
  return state.empty() ? "stopped" : state;
}

void AddLsCommand(CLI::App& app, Cli& cli) {
  auto* cmd = app.add_subcommand("ls", "List workspaces");
  auto json = std::make_shared<bool>(false);
  auto all_contexts = std::make_shared<bool>(false);
  cmd->add_flag("--json", *json, "Print as JSON");
  cmd->add_flag("--all-contexts", *all_contexts,
                "List the workspaces of this machine and of every context (cloister context ls), "
                "with a column for each one's host");
  cmd->callback([&cli, json, all_contexts] {
    if (*all_contexts) {
      ListAllContexts(cli, cli.store_flag(), *json);
      return;
    }
    auto store = OpenStore(cli);
    if (!store.ok()) {
      cli.Fail(store.error());
      return;
    }
    vm::CollectStaleBrowserDirs((*store)->root());  // browser VM disks a crash left
    auto list = (*store)->List();
    if (!list.ok()) {
      cli.Fail(list.error());
      return;
    }
    if (*json) {
      nlohmann::json arr = nlohmann::json::array();
      for (const WorkspaceSummary& s : *list) {
        // Live state from the supervisor's pid-file lock and socket answer (vm/state.h).
        vm::VmStatus vs = vm::WorkspaceStatus(**store, s.name);
        nlohmann::json j = {{"name", s.name},
                            {"state", vm::VmStateName(vs.state)},
                            {"allocated_bytes", s.total_allocated}};
        if (!s.problem.empty()) j["problem"] = s.problem;
        if (!vs.hint.empty()) j["hint"] = vs.hint;
        j["browser"] = BrowserState(vs);
        if (auto b = vs.info.find("browser"); b != vs.info.end() && b->is_object() &&
                                              b->contains("keep_profile")) {
          j["browser_keep_profile"] = b->value("keep_profile", false);
        }
        if (s.config) {
          j["compromised"] = s.config->compromised;
          j["mac"] = s.config->mac;
          j["image"] = s.config->image.name;
          j["checkpoints"] = s.config->checkpoints.size();
          j["system_disk"] = s.config->system_top.empty() ? "absent" : "present";
        }
        arr.push_back(j);
      }
      cli.PrintJson(arr);
      return;
    }
    char line[256];
    std::snprintf(line, sizeof(line), "%-24s %-10s %-10s %-11s %-17s %s\n", "NAME", "STATE",
                  "DISK", "CHECKPOINTS", "MAC", "NOTE");
    cli.out() << line;
    for (const WorkspaceSummary& s : *list) {
      vm::VmStatus vs = vm::WorkspaceStatus(**store, s.name);
      std::string note = s.problem;
      if (vs.state == vm::VmState::kBroken) note = vs.detail + " (" + vs.hint + ")";
      else if (s.config && s.config->compromised) note = "COMPROMISED: run `cloister wipe " + s.name + "`";
      else if (s.config && s.config->system_top.empty() && note.empty()) {
        note = "system disk re-cloned at next start";
      }
      if (BrowserState(vs) != "stopped") {
        note += std::string(note.empty() ? "" : "; ") + "browser " + BrowserState(vs);
        if (auto b = vs.info.find("browser"); b != vs.info.end() && b->is_object() &&
                                              b->value("keep_profile", false)) {
          note += " (kept profile)";
        }
      }
      std::snprintf(line, sizeof(line), "%-24s %-10s %-10s %-11zu %-17s ", s.name.c_str(),
                    vm::VmStateName(vs.state), FormatSize(s.total_allocated).c_str(),
                    s.config ? s.config->checkpoints.size() : 0,
                    s.config ? s.config->mac.c_str() : "-");
      // SECURITY: a note can quote the supervisor's detail of a broken VM (guest-influenced).
      cli.out() << line << TerminalSafe(note) << "\n";
    }
  });
}

}  // namespace cloister::cli
