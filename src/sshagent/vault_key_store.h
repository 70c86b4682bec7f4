// The production KeyStore: the workspace's SSH seed as the "ssh-ed25519" blob of its encrypted
// secrets file (vault). Each call opens the vault, so callers hold the workspace lock around a
// SaveSeed (read-modify-write of secrets.enc).
#pragma once

#include <functional>
#include <string>

#include "base/result.h"
#include "sshagent/key_store.h"
#include "vault/vault.h"

namespace cloister::sshagent {

// Public key file under the workspace directory.
// TODO(store): use layout::kSshDir / layout::kSshPublicKeyFile once store/layout.h is on main.
inline constexpr char kSshDirName[] = "ssh";
inline constexpr char kSshPublicKeyName[] = "id_ed25519.pub";

class VaultKeyStore : public KeyStore {
 public:
  explicit VaultKeyStore(vault::VaultLocation location,
                         vault::KeyBackend backend = vault::KeyBackendFromEnv())
      : location_(std::move(location)), backend_(backend) {}
  Result<std::optional<SecretString>> LoadSeed() override;
  Status SaveSeed(std::string_view seed) override;

 private:
  vault::VaultLocation location_;
  vault::KeyBackend backend_;
};

// <workspace_dir>/ssh/id_ed25519.pub (creating ssh/ with mode 0700).
Result<std::string> PublicKeyPath(const std::string& workspace_dir);

// The store's hook for `create` and `wipe-home` (StoreOptions::make_ssh_key): a fresh key in
// <workspace_dir>/secrets.enc and its public key in <workspace_dir>/ssh/id_ed25519.pub.
// `keys_dir` is the store's keys directory (vault master key and placeholder salt).
std::function<Status(const std::string& name, const std::string& workspace_dir)> MakeWorkspaceKeyHook(
    std::string keys_dir);

}  // namespace cloister::sshagent
