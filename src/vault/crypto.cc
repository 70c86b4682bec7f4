#include "vault/crypto.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/kdf.h>
#include <openssl/rand.h>

#include <array>
#include <memory>

namespace cloister::vault {
namespace {

constexpr size_t kNonceSize = 12;
constexpr size_t kTagSize = 16;

struct CtxFree {
  void operator()(EVP_CIPHER_CTX* c) const { EVP_CIPHER_CTX_free(c); }
  void operator()(EVP_PKEY_CTX* c) const { EVP_PKEY_CTX_free(c); }
};

const unsigned char* U(std::string_view s) {
  return reinterpret_cast<const unsigned char*>(s.data());
}

}  // namespace

Result<std::string> RandomBytes(size_t n) {
  std::string out(n, '\0');
  if (n > 0 && RAND_bytes(reinterpret_cast<unsigned char*>(out.data()), static_cast<int>(n)) != 1) {
    return Error(ErrorCode::kInternal, "RAND_bytes failed");
  }
  return out;
}

std::string HmacSha256(std::string_view key, std::string_view data) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()), U(data), data.size(), md, &len);
  return std::string(reinterpret_cast<char*>(md), len);
}

Result<std::string> HkdfSha256(std::string_view ikm, std::string_view salt, std::string_view info,
                               size_t length) {
  if (length == 0 || length > 255 * 32) {
    return Error(ErrorCode::kInvalidArgument, "HKDF: bad output length");
  }
  std::unique_ptr<EVP_PKEY_CTX, CtxFree> ctx(EVP_PKEY_CTX_new_id(EVP_PKEY_HKDF, nullptr));
  std::string out(length, '\0');
  size_t out_len = length;
  if (!ctx || EVP_PKEY_derive_init(ctx.get()) <= 0 ||
      EVP_PKEY_CTX_set_hkdf_md(ctx.get(), EVP_sha256()) <= 0 ||
      EVP_PKEY_CTX_set1_hkdf_salt(ctx.get(), U(salt), static_cast<int>(salt.size())) <= 0 ||
      EVP_PKEY_CTX_set1_hkdf_key(ctx.get(), U(ikm), static_cast<int>(ikm.size())) <= 0 ||
      EVP_PKEY_CTX_add1_hkdf_info(ctx.get(), U(info), static_cast<int>(info.size())) <= 0 ||
      EVP_PKEY_derive(ctx.get(), reinterpret_cast<unsigned char*>(out.data()), &out_len) <= 0 ||
      out_len != length) {
    return Error(ErrorCode::kInternal, "HKDF derivation failed");
  }
  return out;
}

Result<std::string> AeadSeal(std::string_view key, std::string_view aad, std::string_view plaintext) {
  if (key.size() != kAeadKeySize) return Error(ErrorCode::kInvalidArgument, "AEAD: bad key size");
  ASSIGN_OR_RETURN(std::string nonce, RandomBytes(kNonceSize));
  std::unique_ptr<EVP_CIPHER_CTX, CtxFree> ctx(EVP_CIPHER_CTX_new());
  std::string out = nonce;
  out.resize(kNonceSize + plaintext.size() + kTagSize);
  auto* ct = reinterpret_cast<unsigned char*>(out.data()) + kNonceSize;
  int len = 0, total = 0;
  if (!ctx || EVP_EncryptInit_ex(ctx.get(), EVP_aes_256_gcm(), nullptr, U(key), U(nonce)) != 1 ||
      (!aad.empty() &&
       EVP_EncryptUpdate(ctx.get(), nullptr, &len, U(aad), static_cast<int>(aad.size())) != 1) ||
      EVP_EncryptUpdate(ctx.get(), ct, &len, U(plaintext), static_cast<int>(plaintext.size())) != 1) {
    return Error(ErrorCode::kInternal, "AEAD encryption failed");
  }
  total = len;
  if (EVP_EncryptFinal_ex(ctx.get(), ct + total, &len) != 1 ||
      EVP_CIPHER_CTX_ctrl(ctx.get(), EVP_CTRL_GCM_GET_TAG, kTagSize, ct + plaintext.size()) != 1) {
    return Error(ErrorCode::kInternal, "AEAD encryption failed");
  }
  return out;
}

Result<std::string> AeadOpen(std::string_view key, std::string_view aad, std::string_view sealed) {
  if (key.size() != kAeadKeySize) return Error(ErrorCode::kInvalidArgument, "AEAD: bad key size");
  if (sealed.size() < kNonceSize + kTagSize) {
    return Error(ErrorCode::kCorrupt, "encrypted data is truncated");
  }
  std::string_view nonce = sealed.substr(0, kNonceSize);
  std::string_view ct = sealed.substr(kNonceSize, sealed.size() - kNonceSize - kTagSize);
  std::string tag(sealed.substr(sealed.size() - kTagSize));
  std::unique_ptr<EVP_CIPHER_CTX, CtxFree> ctx(EVP_CIPHER_CTX_new());
  std::string out(ct.size(), '\0');
  int len = 0;
  if (!ctx || EVP_DecryptInit_ex(ctx.get(), EVP_aes_256_gcm(), nullptr, U(key), U(nonce)) != 1 ||
      (!aad.empty() &&
       EVP_DecryptUpdate(ctx.get(), nullptr, &len, U(aad), static_cast<int>(aad.size())) != 1) ||
      EVP_DecryptUpdate(ctx.get(), reinterpret_cast<unsigned char*>(out.data()), &len, U(ct),
                        static_cast<int>(ct.size())) != 1 ||
      EVP_CIPHER_CTX_ctrl(ctx.get(), EVP_CTRL_GCM_SET_TAG, kTagSize, tag.data()) != 1 ||
      EVP_DecryptFinal_ex(ctx.get(), reinterpret_cast<unsigned char*>(out.data()) + len, &len) != 1) {
    SecureWipe(out);
    return Error(ErrorCode::kCorrupt, "decryption failed: wrong key or the file was modified");
  }
  return out;
}

std::string Base64Encode(std::string_view bytes, bool url, bool pad) {
  static constexpr char kStd[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  static constexpr char kUrl[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
  const char* a = url ? kUrl : kStd;
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 3 <= bytes.size(); i += 3) {
    uint32_t v = (uint8_t(bytes[i]) << 16) | (uint8_t(bytes[i + 1]) << 8) | uint8_t(bytes[i + 2]);
    out += a[v >> 18];
    out += a[(v >> 12) & 63];
    out += a[(v >> 6) & 63];
    out += a[v & 63];
  }
  size_t rest = bytes.size() - i;
  if (rest == 1) {
    uint32_t v = uint8_t(bytes[i]) << 16;
    out += a[v >> 18];
    out += a[(v >> 12) & 63];
    if (pad) out += "==";
  } else if (rest == 2) {
    uint32_t v = (uint8_t(bytes[i]) << 16) | (uint8_t(bytes[i + 1]) << 8);
    out += a[v >> 18];
    out += a[(v >> 12) & 63];
    out += a[(v >> 6) & 63];
    if (pad) out += '=';
  }
  return out;
}

Result<std::string> Base64Decode(std::string_view text) {
  while (!text.empty() && text.back() == '=') text.remove_suffix(1);
  std::string out;
  out.reserve(text.size() * 3 / 4);
  uint32_t acc = 0;
  int bits = 0;
  for (char c : text) {
    int v;
    if (c >= 'A' && c <= 'Z') v = c - 'A';
    else if (c >= 'a' && c <= 'z') v = c - 'a' + 26;
    else if (c >= '0' && c <= '9') v = c - '0' + 52;
    else if (c == '+' || c == '-') v = 62;
    else if (c == '/' || c == '_') v = 63;
    else return Error(ErrorCode::kInvalidArgument, "invalid base64");
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += static_cast<char>((acc >> bits) & 0xff);
    }
  }
  if (bits >= 6) return Error(ErrorCode::kInvalidArgument, "invalid base64 length");
  return out;
}

uint32_t Crc32(std::string_view bytes) {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t n = 0; n < 256; ++n) {
      uint32_t c = n;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t[n] = c;
    }
    return t;
  }();
  uint32_t crc = 0xFFFFFFFFu;
  for (char ch : bytes) crc = table[(crc ^ uint8_t(ch)) & 0xff] ^ (crc >> 8);
  return crc ^ 0xFFFFFFFFu;
}

void SecureWipe(std::string& s) {
  if (!s.empty()) OPENSSL_cleanse(s.data(), s.size());
  s.clear();
}

}  // namespace cloister::vault
