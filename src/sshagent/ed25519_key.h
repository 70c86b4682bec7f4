// A workspace's SSH key: Ed25519 via OpenSSL 3, with the OpenSSH public key and signature formats.
//
// Ownership: an Ed25519Key owns its OpenSSL key object; the private seed lives only in OpenSSL's
// memory and in the encrypted store. Seed() is for the key store alone (SECURITY: never log it,
// never write it anywhere but the vault; the caller must cleanse the copy, see SecretString).
// A const Ed25519Key may be used to sign from several threads at once.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "base/result.h"

typedef struct evp_pkey_st EVP_PKEY;

namespace cloister::sshagent {

inline constexpr std::string_view kEd25519KeyType = "ssh-ed25519";
inline constexpr size_t kEd25519SeedSize = 32;
inline constexpr size_t kEd25519PublicSize = 32;
inline constexpr size_t kEd25519SignatureSize = 64;

// A std::string that is wiped (OPENSSL_cleanse) when destroyed. For private key seeds.
class SecretString {
 public:
  SecretString() = default;
  explicit SecretString(std::string s) : s_(std::move(s)) {}
  SecretString(SecretString&& o) noexcept : s_(std::move(o.s_)) { o.Wipe(); }
  SecretString& operator=(SecretString&& o) noexcept;
  SecretString(const SecretString&) = delete;
  SecretString& operator=(const SecretString&) = delete;
  ~SecretString() { Wipe(); }

  const std::string& str() const { return s_; }
  std::string_view view() const { return s_; }
  size_t size() const { return s_.size(); }

 private:
  void Wipe();
  std::string s_;
};

class Ed25519Key {
 public:
  // A fresh key from OpenSSL's CSPRNG.
  static Result<Ed25519Key> Generate();
  // The key whose 32-byte private seed is `seed` (RFC 8032).
  static Result<Ed25519Key> FromSeed(std::string_view seed);

  Ed25519Key(Ed25519Key&&) noexcept;
  Ed25519Key& operator=(Ed25519Key&&) noexcept;
  ~Ed25519Key();

  // The 32-byte private seed. SECURITY: for the key store only.
  Result<SecretString> Seed() const;
  // The 32-byte raw public key.
  const std::string& public_key() const { return public_key_; }
  // OpenSSH public key blob: string "ssh-ed25519", string pk.
  std::string PublicKeyBlob() const;
  // "ssh-ed25519 AAAA... comment" (authorized_keys / .pub format, no newline).
  std::string AuthorizedKeysLine(std::string_view comment) const;
  // "SHA256:..." as ssh-keygen -l prints it.
  std::string Fingerprint() const;

  // Raw 64-byte Ed25519 signature of `data`.
  Result<std::string> SignRaw(std::string_view data) const;
  // OpenSSH signature blob: string "ssh-ed25519", string sig.
  Result<std::string> SignBlob(std::string_view data) const;

 private:
  explicit Ed25519Key(EVP_PKEY* pkey);
  EVP_PKEY* pkey_ = nullptr;
  std::string public_key_;
};

// Verifies an OpenSSH ssh-ed25519 signature blob over `data` with a raw 32-byte public key.
Status VerifyEd25519Blob(std::string_view public_key, std::string_view data,
                         std::string_view signature_blob);

// Base64 (standard alphabet, padded) as OpenSSH uses it.
std::string Base64Encode(std::string_view bytes);

}  // namespace cloister::sshagent
