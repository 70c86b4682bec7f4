// The keyring: publisher public keys this store trusts, each pinned to the channels it may sign.
//
// Stored as JSON at <store>/keys/keyring.json (0644, replaced atomically). The local publisher key
// is added for channel "local" by the first local build; other publishers are added explicitly
// with `cloister image trust`. Nothing else adds keys, and no flag or variable skips the check.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"

namespace cloister::catalog {

inline constexpr char kPublicKeyFormat[] = "cloister-publisher-key-v1";

struct TrustedKey {
  std::string id;          // KeyIdOf(public_key)
  std::string public_key;  // 32 raw bytes
  std::vector<std::string> channels;
  std::string comment;

  bool AllowsChannel(const std::string& channel) const;
};

class Keyring {
 public:
  // A missing file is an empty keyring.
  static Result<Keyring> Load(const std::string& path);
  Status Save(const std::string& path) const;

  const TrustedKey* Find(const std::string& id) const;
  // Adds the key, or adds `channel` to an existing key's channels.
  void Trust(const std::string& public_key, const std::string& channel, const std::string& comment);
  const std::vector<TrustedKey>& keys() const { return keys_; }

 private:
  std::vector<TrustedKey> keys_;
};

// A shareable public key: "cloister-publisher-key-v1 ed25519 PUBHEX COMMENT...\n".
std::string FormatPublicKey(std::string_view public_key, std::string_view comment);
// SECURITY: parses a key file given by the user; strict and bounded.
Result<std::string> ParsePublicKey(std::string_view text);

// Writes `content` to `path` atomically (temp file, fsync, rename, fsync dir).
Status WriteFileAtomic(const std::string& path, std::string_view content, unsigned mode);

}  // namespace cloister::catalog
