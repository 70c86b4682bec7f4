#include "sshagent/vault_key_store.h"

#include <sys/stat.h>

#include <cerrno>

namespace cloister::sshagent {

Result<std::optional<SecretString>> VaultKeyStore::LoadSeed() {
  ASSIGN_OR_RETURN(vault::Vault v, vault::Vault::Open(location_, backend_));
  const std::string* blob = v.FindBlob(kSshKeySecretName);
  if (!blob) return std::optional<SecretString>();
  return std::optional<SecretString>(SecretString(*blob));
}

Status VaultKeyStore::SaveSeed(std::string_view seed) {
  ASSIGN_OR_RETURN(vault::Vault v, vault::Vault::Open(location_, backend_));
  v.PutBlob(kSshKeySecretName, std::string(seed));
  return v.Save();
}

Result<std::string> PublicKeyPath(const std::string& workspace_dir) {
  std::string dir = workspace_dir + "/" + kSshDirName;
  if (mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) return ErrnoError("mkdir " + dir, errno);
  return dir + "/" + kSshPublicKeyName;
}

std::function<Status(const std::string&, const std::string&)> MakeWorkspaceKeyHook(std::string keys_dir) {
  return [keys_dir](const std::string& name, const std::string& workspace_dir) -> Status {
    VaultKeyStore store(vault::VaultLocation{keys_dir, workspace_dir + "/" + vault::kSecretsFile, name});
    ASSIGN_OR_RETURN(std::string pub, PublicKeyPath(workspace_dir));
    ASSIGN_OR_RETURN(Ed25519Key key, MakeWorkspaceKey(store, name, pub));
    (void)key;
    return OkStatus();
  };
}

}  // namespace cloister::sshagent
