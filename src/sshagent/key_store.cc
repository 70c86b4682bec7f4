#include "sshagent/key_store.h"

#include "base/file_util.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>

namespace cloister::sshagent {
namespace {

// Writes a small PUBLIC file atomically: temp file, fsync, rename.
Status WritePublicFile(const std::string& path, const std::string& content) {
  return WriteFileAtomic(path, content, 0644);
}

}  // namespace

Result<std::optional<SecretString>> MemoryKeyStore::LoadSeed() {
  if (!seed_) return std::optional<SecretString>();
  return std::optional<SecretString>(SecretString(seed_->str()));
}

Status MemoryKeyStore::SaveSeed(std::string_view seed) {
  seed_.emplace(std::string(seed));
  ++saves_;
  return OkStatus();
}

std::string KeyComment(std::string_view workspace) { return "cloister:" + std::string(workspace); }

Result<Ed25519Key> MakeWorkspaceKey(KeyStore& store, const std::string& workspace,
                                    const std::string& public_key_path) {
  ASSIGN_OR_RETURN(Ed25519Key key, Ed25519Key::Generate());
  {
    ASSIGN_OR_RETURN(SecretString seed, key.Seed());
    RETURN_IF_ERROR(store.SaveSeed(seed.view()));
  }
  if (!public_key_path.empty()) {
    RETURN_IF_ERROR(WritePublicFile(public_key_path, key.AuthorizedKeysLine(KeyComment(workspace)) + "\n"));
  }
  return key;
}

Result<Ed25519Key> LoadWorkspaceKey(KeyStore& store, const std::string& workspace) {
  ASSIGN_OR_RETURN(std::optional<SecretString> seed, store.LoadSeed());
  if (!seed) {
    return Error(ErrorCode::kNotFound, "workspace " + workspace + " has no SSH key",
                 "run `cloister ssh-keygen " + workspace + "` to make one");
  }
  auto key = Ed25519Key::FromSeed(seed->view());
  if (!key.ok()) return key.error().WithContext("the stored SSH key of " + workspace + " is damaged");
  return key;
}

Result<Ed25519Key> LoadOrMakeWorkspaceKey(KeyStore& store, const std::string& workspace,
                                          const std::string& public_key_path, bool* created) {
  ASSIGN_OR_RETURN(std::optional<SecretString> seed, store.LoadSeed());
  if (seed) {
    *created = false;
    auto key = Ed25519Key::FromSeed(seed->view());
    if (!key.ok()) return key.error().WithContext("the stored SSH key of " + workspace + " is damaged");
    if (!public_key_path.empty()) {
      RETURN_IF_ERROR(WritePublicFile(public_key_path, key->AuthorizedKeysLine(KeyComment(workspace)) + "\n"));
    }
    return key;
  }
  *created = true;
  return MakeWorkspaceKey(store, workspace, public_key_path);
}

Result<std::unique_ptr<SignOnlyAgent>> AgentForWorkspace(KeyStore& store, const std::string& workspace,
                                                         ConfirmFn confirm) {
  ASSIGN_OR_RETURN(Ed25519Key key, LoadWorkspaceKey(store, workspace));
  return std::make_unique<SignOnlyAgent>(std::move(key), KeyComment(workspace), std::move(confirm));
}

}  // namespace cloister::sshagent
