// The dashboard's Backend (ui/backend.h) over the CLI itself: every view and action is the CLI
// verb run in-process (RunCli with --store), so the page shows exactly what `ls --json`,
// `describe --json` and `trace` show, and an action is exactly the verb (confirmed with --yes
// only after the page showed the verb's own confirmation, cli/disposal_prompts.h).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>

#include "ui/backend.h"

namespace cloister::cli {

struct UiBackendOptions {
  std::string store_root;
  // Test seam: runs the residue audit (default: `cloister audit residue NAME --json`, which needs
  // the VM running). Browser tests without a VM put a report here.
  std::function<Result<nlohmann::json>(const std::string& name)> run_audit;
  // Test seam: the control sockets to keep consent listeners on (default: those of the
  // workspaces whose supervisor is alive, from the pid file's lock; asked every second).
  std::function<std::map<std::string, std::string>()> control_sockets;
};

std::unique_ptr<ui::Backend> MakeUiBackend(UiBackendOptions options);

// The argv (after `cloister --store ROOT`) of the CLI verb an action runs.
std::vector<std::string> ActionArgv(ui::Action action, const std::string& name,
                                    const std::string& checkpoint);

}  // namespace cloister::cli
