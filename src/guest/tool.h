// The workspace's coding agent inside the guest (base/agent_tools.h; `--tool claude|codex`).
//
// At every boot with a tool, the agent writes two scripts to the per-boot run directory and starts
// the installer as root in the background:
//   - tool-install.sh (root): if the install marker on the SYSTEM disk (marker_dir/tool-NAME
//     .installed, holding the pinned package spec) is absent or names another version, runs
//     `npm install -g SPEC` through the workspace's proxy (the environment the host sent: proxy,
//     CA, registry override), output appended to `log`; then the marker. Progress and outcome go
//     to the status file ("installing", "ok", "failed N"). `cloister reset` drops the system disk,
//     so the next boot installs again; the home (the agent's settings) is kept.
//   - tool-window.sh (the user, in the first tmux window, in `workdir`): shows the install's log
//     while it runs, names the log on failure; pre-answers the tool's first-run prompts where the
//     tool allows it (settings files in the home); runs the agent; when it exits, a login shell.
//
// Who writes what: only the agent (root) writes the scripts and the status file; the installer
// (root) writes the marker and the log; the window script (the user) writes only the user's own
// settings files.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "base/agent_tools.h"
#include "base/result.h"
#include "protocol/contract.h"

namespace cloister::guest {

struct ToolPaths {
  std::string marker_dir = "/usr/local/lib/cloister";  // system disk: `reset` removes it
  std::string run_dir = protocol::kGuestRunDir;               // tmpfs: per boot
  std::string log = "/var/log/cloister-tool.log";      // system disk
  std::string Marker(const AgentTool& t) const;         // marker_dir/tool-NAME.installed
  std::string Status() const { return run_dir + "/tool.status"; }
  std::string InstallScript() const { return run_dir + "/tool-install.sh"; }
  std::string WindowScript() const { return run_dir + "/tool-window.sh"; }
};

// The scripts' text (POSIX sh; pure, tested by running them on the host with a fake npm).
std::string ToolInstallScript(const AgentTool& tool, const ToolPaths& paths);
std::string ToolWindowScript(const AgentTool& tool, const ToolPaths& paths, const std::string& workdir);

// Writes tool-window.sh (0755, root), before the tmux session whose first window runs it starts;
// it waits for the status file, so it may run before the installer starts.
Status WriteToolWindowScript(const AgentTool& tool, const ToolPaths& paths,
                             const std::string& workdir);

// Writes tool-install.sh (0755, root) and starts it as root in the background with `env`
// (complete, "K=V"); a thread reaps it. If it cannot start, the status file says "failed".
Status StartToolInstall(const AgentTool& tool, const ToolPaths& paths,
                        const std::vector<std::string>& env);

// The tmux command of the first window for `tool` ({} for the shell: tmux's default shell).
std::vector<std::string> ToolWindowCommand(const AgentTool& tool, const ToolPaths& paths);

}  // namespace cloister::guest
