#include "cli/vault_access.h"

#include "base/strings.h"
#include "store/layout.h"

namespace cloister::cli {

Result<VaultAccess> OpenVaultAccess(Cli& cli, const std::string& name, bool mutate) {
  ASSIGN_OR_RETURN(std::unique_ptr<Store> store, Store::Open(cli.StoreRoot()));
  ASSIGN_OR_RETURN(WorkspaceConfig config, store->LoadConfig(name));
  (void)config;  // exists and is readable
  VaultAccess a;
  a.paths = store->Paths(name);
  a.location = vault::VaultLocation{JoinPath(store->root(), layout::kKeysDir), a.paths.secrets, name};
  if (!mutate) return a;
  Result<WorkspaceLock> lock = store->LockWorkspace(name);
  if (lock.ok()) {
    a.workspace_lock.emplace(std::move(lock).value());
  } else if (lock.error().code() == ErrorCode::kBusy &&
             store->State(name) == WorkspaceState::kRunning) {
    a.running = true;
  } else {
    return lock.error();
  }
  ASSIGN_OR_RETURN(a.config_lock, store->env()->LockFile(a.paths.config_lock, /*wait=*/true));
  return a;
}

void NoteRunning(Cli& cli, const VaultAccess& access, const std::string& name) {
  if (access.running) {
    cli.err() << "cloister: " << name << " is running; the change takes effect at its next start "
              << "(`cloister reboot " << name << "`)\n";
  }
}

}  // namespace cloister::cli
