// A workspace's encrypted secrets file, found through the store, with the locks a change holds.
// Shared by the verbs that read or write it (cred, ssh-keygen).
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "base/result.h"
#include "cli/cli.h"
#include "store/store.h"
#include "vault/vault.h"

namespace cloister::cli {

// Mutations take the workspace lock, as every mutating verb does, so they never interleave with
// create/wipe-home/wipe/rm (which also write or delete the secrets file). A running VM's
// supervisor holds the workspace lock for the VM's lifetime and reads the secrets file only at
// boot; so while the VM runs a change goes ahead under the config lock alone (it serialises
// concurrent writers) and takes effect at the next start. Reads take no lock: the file is
// replaced atomically.
struct VaultAccess {
  vault::VaultLocation location;
  WorkspacePaths paths;
  std::optional<WorkspaceLock> workspace_lock;
  std::unique_ptr<FileLock> config_lock;
  bool running = false;  // a change applies at the next boot
};

// Fails with kNotFound (and a hint) when there is no such workspace.
Result<VaultAccess> OpenVaultAccess(Cli& cli, const std::string& name, bool mutate);

// For a workspace `run` just created with a coding agent (base/agent_tools.h): when the agent's
// key variable (ANTHROPIC_API_KEY, OPENAI_API_KEY) is set in this process's environment and the
// workspace has no such credential yet, adds it to the workspace's vault (as `cloister cred add
// NAME KIND --from-env VAR` would) and says so. Returns whether it added one.
// SECURITY: the value goes from the environment into the encrypted secrets file only; the guest
// gets its placeholder.
Result<bool> ImportToolKeyFromEnv(Cli& cli, const std::string& name, const std::string& tool);

// Tells the user a change waits for the next boot, when the VM runs.
void NoteRunning(Cli& cli, const VaultAccess& access, const std::string& name);

}  // namespace cloister::cli
