// Small wrappers over OpenSSL 3 for the vault and the proxy: randomness, HMAC/HKDF, AEAD,
// base64, CRC32. Every function returns errors as values; nothing here throws.
//
// SECURITY: callers hold secrets in std::string; SecureWipe() clears one before it is freed where
// the value was a key or a decrypted credential. This is best effort (copies made by the standard
// library are not tracked); the guarantee we make is "never written to a file, env or the guest",
// not "never in swap".
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "base/result.h"

namespace cloister::vault {

// n bytes from the OS CSPRNG (RAND_bytes).
Result<std::string> RandomBytes(size_t n);

// HMAC-SHA256(key, data), 32 bytes.
std::string HmacSha256(std::string_view key, std::string_view data);

// HKDF-SHA256 (RFC 5869) extract-and-expand to `length` bytes (at most 255*32).
Result<std::string> HkdfSha256(std::string_view ikm, std::string_view salt, std::string_view info,
                               size_t length);

// AES-256-GCM. Seal returns nonce(12) || ciphertext || tag(16) with a fresh random nonce.
// Open fails with kCorrupt when the tag does not verify (wrong key, wrong AAD, tampered bytes).
inline constexpr size_t kAeadKeySize = 32;
Result<std::string> AeadSeal(std::string_view key, std::string_view aad, std::string_view plaintext);
Result<std::string> AeadOpen(std::string_view key, std::string_view aad, std::string_view sealed);

// RFC 4648 base64. `url` selects the URL-safe alphabet; `pad` adds '=' padding.
std::string Base64Encode(std::string_view bytes, bool url = false, bool pad = true);
// Accepts both alphabets, with or without padding; rejects anything else.
Result<std::string> Base64Decode(std::string_view text);

// CRC-32 (IEEE 802.3, as zlib's crc32).
uint32_t Crc32(std::string_view bytes);

// Overwrites the string's bytes with zeros (OPENSSL_cleanse) and clears it.
void SecureWipe(std::string& s);

}  // namespace cloister::vault
