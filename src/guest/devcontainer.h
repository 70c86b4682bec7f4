// A devcontainer's lifecycle commands inside the workspace (the host's devcontainer/ reads them
// from the repository; the metadata config's "devcontainer" object carries them here).
//
// At every boot whose config has them, once the terminal is proven and the egress is up (beside
// the coding agent's installer, guest/tool.h), the agent runs on a thread of its own:
//   - the create steps (features' and devcontainer.json's onCreateCommand, updateContentCommand,
//     postCreateCommand, in that order), unless the marker on the SYSTEM disk already names this
//     set of steps (`create_id`): they run once per system disk, so `cloister reset` (which drops
//     it, like a container rebuild) runs them again, a reboot does not;
//   - then the start steps (postStartCommand), at every boot.
// Each command runs as the config's user (remoteUser; root when it says so), in the workspace
// folder (the first shared folder, else the user's home), with the workspace's environment (the
// proxy, the CA, containerEnv): a string by /bin/sh -c, an array as argv, the named commands of
// an object in parallel. Their output is appended to `log`; the status file says "running STEP",
// "ok" or "failed STEP (exit N)"; the first failure stops the rest (the marker is written only
// when every create step succeeded, so the next boot tries again). The window script (the
// "devcontainer" tmux window, or the first window when there is no coding agent) shows the log
// while they run, then the outcome, then a login shell.
//
// Who writes what: the agent (root) writes the window script, the status file, the log and the
// marker; the commands run as the user and can write only what the user can.
//
// SECURITY: the commands are the repository's code (an agent may have written them). They run
// only here, in the VM, as hostile as the rest of the guest, and reach out only through the proxy.
// The config's object is parsed with bounds (ParseDevcontainerLifecycle; fuzz/agent_config).
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/result.h"
#include "guest/users.h"
#include "protocol/contract.h"

namespace cloister::guest {

inline constexpr size_t kMaxLifecycleSteps = 320;
inline constexpr size_t kMaxLifecycleCommands = 16;  // per step
inline constexpr size_t kMaxLifecycleArgs = 256;

struct LifecycleCommandSpec {
  std::string name;               // a parallel command's name; "" otherwise
  std::string shell;              // run by /bin/sh -c
  std::vector<std::string> argv;  // or run as argv (non-empty)
};

struct LifecycleStep {
  std::string name;    // "postCreateCommand"
  std::string origin;  // "devcontainer.json", "Feature ./hello"
  bool parallel = false;
  std::vector<LifecycleCommandSpec> commands;
};

struct DevcontainerLifecycle {
  bool enabled = false;  // the config has a "devcontainer" object
  std::string user = protocol::kGuestUser;  // remoteUser
  std::string create_id;                    // names the create steps (hex); the marker holds it
  std::vector<LifecycleStep> create;
  std::vector<LifecycleStep> start;
};

// The metadata config's "devcontainer" object:
//   {"user": NAME, "create_id": HEX, "create": [STEP...], "start": [STEP...]}
//   STEP: {"name": S, "origin": S, "parallel": B, "commands": [{"name": S, "shell": S} |
//                                                             {"name": S, "argv": [S...]}]}
Result<DevcontainerLifecycle> ParseDevcontainerLifecycle(const nlohmann::json& j);
nlohmann::json DevcontainerLifecycleJson(const DevcontainerLifecycle& l);

struct LifecyclePaths {
  std::string marker_dir = "/var/lib/cloister";       // system disk: `reset` removes it
  std::string run_dir = protocol::kGuestRunDir;       // tmpfs: per boot
  std::string log = "/var/log/cloister-devcontainer.log";  // system disk
  std::string Marker() const { return marker_dir + "/devcontainer.created"; }
  std::string Status() const { return run_dir + "/devcontainer.status"; }
  std::string WindowScript() const { return run_dir + "/devcontainer-window.sh"; }
};

struct LifecycleRun {
  UserInfo user;
  bool switch_user = true;        // off in host tests (the commands run as the test's user)
  std::vector<std::string> env;   // complete, "K=V"
  std::string cwd;                // the workspace folder ("" or missing: the user's home)
  LifecyclePaths paths;
};

// Runs the steps (blocking) as described above. The error is the first failure's.
Status RunDevcontainerLifecycle(const DevcontainerLifecycle& l, const LifecycleRun& run);

// The window script's text (fixed; POSIX sh), and writing it (0755, root).
std::string LifecycleWindowScript(const LifecyclePaths& paths);
Status WriteLifecycleWindowScript(const LifecyclePaths& paths);

}  // namespace cloister::guest
