// Ed25519 (OpenSSL EVP) keys and the detached signature file of a catalog.
//
// SECURITY: the publisher private key is a secret. It is created once per store (PEM PKCS#8,
// mode 0600, in keys/) by the first local image build, is only read to sign the local channel's
// catalog, and never leaves the host: only its public key goes into the keyring.
#pragma once

#include <string>
#include <string_view>

#include "base/result.h"

namespace cloister::catalog {

inline constexpr char kSignatureFormat[] = "cloister-catalog-sig-v1";

// Key id: first 16 bytes of SHA-256 over the 32-byte raw public key, hex (32 characters).
std::string KeyIdOf(std::string_view raw_public_key);

class PublisherKey {
 public:
  // Loads the PEM private key at `path`, creating it (0600, parent dir 0700) if absent.
  static Result<PublisherKey> LoadOrCreate(const std::string& path);
  // A fresh key in memory (tests).
  static Result<PublisherKey> Generate();

  const std::string& public_key() const { return public_key_; }  // 32 raw bytes
  std::string key_id() const { return KeyIdOf(public_key_); }
  Result<std::string> Sign(std::string_view message) const;      // 64-byte signature

 private:
  std::string private_pem_;
  std::string public_key_;
};

// True only if `signature` is a valid Ed25519 signature of `message` by `raw_public_key`.
bool VerifyEd25519(std::string_view raw_public_key, std::string_view message,
                   std::string_view signature);

struct SignatureFile {
  std::string key_id;     // 32 hex
  std::string signature;  // 64 raw bytes
};

// One line: "cloister-catalog-sig-v1 ed25519 KEYID SIGHEX\n".
std::string SerializeSignature(const SignatureFile& s);
// SECURITY: untrusted input; bounded, strict (malformed is Rejection::kBadSignature).
Result<SignatureFile> ParseSignature(std::string_view text);

}  // namespace cloister::catalog
