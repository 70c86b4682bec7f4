#include "cli/vault_access.h"

#include <cstdlib>

#include "base/agent_tools.h"
#include "base/strings.h"
#include "cli/lifecycle_check.h"
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
             AppliesAtNextStart(*store, name, lifecycle::Action::kCredChange)) {
    a.running = true;
  } else {
    return lock.error();
  }
  ASSIGN_OR_RETURN(a.config_lock, store->env()->LockFile(a.paths.config_lock, /*wait=*/true));
  return a;
}

Result<bool> ImportToolKeyFromEnv(Cli& cli, const std::string& name, const std::string& tool_name) {
  const AgentTool* tool = FindAgentTool(tool_name);
  if (!tool || tool->key_env.empty()) return false;
  const char* value = std::getenv(std::string(tool->key_env).c_str());
  if (!value || !*value) return false;
  ASSIGN_OR_RETURN(vault::CredentialKind kind, vault::ParseKind(tool->cred_kind));
  ASSIGN_OR_RETURN(VaultAccess access, OpenVaultAccess(cli, name, /*mutate=*/true));
  ASSIGN_OR_RETURN(vault::Vault v, vault::Vault::Open(access.location));
  ASSIGN_OR_RETURN(vault::Credential c, vault::MakeCredential(kind, std::string(value), {}, "", false));
  if (v.Find(c.id) != nullptr) return false;  // the workspace's own credential wins
  ASSIGN_OR_RETURN(std::string placeholder, v.PlaceholderFor(c));
  v.Put(std::move(c));
  RETURN_IF_ERROR(v.Save());
  cli.err() << "cloister: " << name << ": " << tool->key_env << " from your environment is in its "
            << "vault; the guest sees " << placeholder << "\n";
  return true;
}

void NoteRunning(Cli& cli, const VaultAccess& access, const std::string& name) {
  if (access.running) {
    cli.err() << "cloister: " << name << " is running; the change takes effect at its next start "
              << "(`cloister reboot " << name << "`)\n";
  }
}

}  // namespace cloister::cli
