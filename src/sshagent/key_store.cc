#include "sshagent/key_store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>

namespace cloister::sshagent {
namespace {

// Writes a small PUBLIC file atomically: temp file, fsync, rename.
Status WritePublicFile(const std::string& path, const std::string& content) {
  std::string tmp = path + ".tmp";
  int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoError("open " + tmp, errno);
  size_t off = 0;
  while (off < content.size()) {
    ssize_t n = write(fd, content.data() + off, content.size() - off);
    if (n < 0) {
      if (errno == EINTR) continue;
      int e = errno;
      close(fd);
      return ErrnoError("write " + tmp, e);
    }
    off += static_cast<size_t>(n);
  }
  if (fsync(fd) != 0) {
    int e = errno;
    close(fd);
    return ErrnoError("fsync " + tmp, e);
  }
  close(fd);
  if (rename(tmp.c_str(), path.c_str()) != 0) return ErrnoError("rename " + tmp, errno);
  return OkStatus();
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
