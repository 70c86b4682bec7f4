#include <cstdio>

#include "cli/commands.h"
#include "cli/store_verbs.h"
#include "supervisor/launcher.h"

namespace cloister::cli {

void AddLsCommand(CLI::App& app, Cli& cli) {
  auto* cmd = app.add_subcommand("ls", "List workspaces");
  auto json = std::make_shared<bool>(false);
  cmd->add_flag("--json", *json, "Print as JSON");
  cmd->callback([&cli, json] {
    auto store = OpenStore(cli);
    if (!store.ok()) {
      cli.Fail(store.error());
      return;
    }
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
      std::snprintf(line, sizeof(line), "%-24s %-10s %-10s %-11zu %-17s ", s.name.c_str(),
                    vm::VmStateName(vs.state), FormatSize(s.total_allocated).c_str(),
                    s.config ? s.config->checkpoints.size() : 0,
                    s.config ? s.config->mac.c_str() : "-");
      cli.out() << line << note << "\n";
    }
  });
}

}  // namespace cloister::cli
