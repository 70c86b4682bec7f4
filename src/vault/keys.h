// Per-install key material kept in the store's keys directory (or the Secret Service).
//
// Files (all 0600 in a 0700 directory; names are constants below until store/layout.h takes them):
//   <keys>/vault.key         32-byte master key that encrypts every workspace's secrets file
//                            (only when the Secret Service is not used)
//   <keys>/placeholder.salt  32-byte salt from which every placeholder is derived
// Both are created once, with O_EXCL, and never rewritten: losing either makes existing secrets
// unreadable (key) or changes every placeholder (salt).
#pragma once

#include <string>

#include "base/result.h"

namespace cloister::vault {

inline constexpr char kVaultKeyFile[] = "vault.key";
inline constexpr char kPlaceholderSaltFile[] = "placeholder.salt";

enum class KeyBackend {
  kAuto,           // Secret Service when a session bus and secret-tool are present and no key
                   // file exists yet; else the key file
  kFile,           // always the 0600 key file
  kSecretService,  // always the Secret Service; fails if unavailable
};

// kAuto unless $CLOISTER_VAULT_KEY_BACKEND is "file" or "secret-service".
KeyBackend KeyBackendFromEnv();

struct MasterKey {
  std::string bytes;        // SECURITY: 32 bytes, wiped by the owner
  std::string backend;      // "file" or "secret-service"
};

// Loads the master key, creating it on first use. An existing key file always wins (so a key made
// on a machine without a session bus keeps working there).
Result<MasterKey> LoadOrCreateMasterKey(const std::string& keys_dir, KeyBackend backend);

// Loads the per-install placeholder salt, creating it on first use.
Result<std::string> LoadOrCreateSalt(const std::string& keys_dir);

// Reads a whole small file (at most `max_bytes`); creates `path` with `content` and mode 0600
// exclusively if absent. Returns the file's content either way. Shared with the proxy's CA.
Result<std::string> ReadSmallFile(const std::string& path, size_t max_bytes);
Status WriteFileAtomic(const std::string& path, std::string_view content, int mode);
Status EnsurePrivateDir(const std::string& dir);

}  // namespace cloister::vault
