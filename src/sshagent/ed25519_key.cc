#include "sshagent/ed25519_key.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <openssl/sha.h>

#include "sshagent/wire.h"

namespace cloister::sshagent {
namespace {

Error OpenSslError(const std::string& what) {
  return Error(ErrorCode::kInternal, "OpenSSL: " + what + " failed");
}

}  // namespace

SecretString& SecretString::operator=(SecretString&& o) noexcept {
  if (this != &o) {
    Wipe();
    s_ = std::move(o.s_);
    o.Wipe();
  }
  return *this;
}

void SecretString::Wipe() {
  if (!s_.empty()) OPENSSL_cleanse(s_.data(), s_.size());
  s_.clear();
}

std::string Base64Encode(std::string_view bytes) {
  std::string out(4 * ((bytes.size() + 2) / 3) + 1, '\0');
  int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                          reinterpret_cast<const unsigned char*>(bytes.data()),
                          static_cast<int>(bytes.size()));
  out.resize(n < 0 ? 0 : static_cast<size_t>(n));
  return out;
}

Ed25519Key::Ed25519Key(EVP_PKEY* pkey) : pkey_(pkey) {}

Ed25519Key::Ed25519Key(Ed25519Key&& o) noexcept : pkey_(o.pkey_), public_key_(std::move(o.public_key_)) {
  o.pkey_ = nullptr;
}

Ed25519Key& Ed25519Key::operator=(Ed25519Key&& o) noexcept {
  if (this != &o) {
    EVP_PKEY_free(pkey_);
    pkey_ = o.pkey_;
    o.pkey_ = nullptr;
    public_key_ = std::move(o.public_key_);
  }
  return *this;
}

Ed25519Key::~Ed25519Key() { EVP_PKEY_free(pkey_); }

Result<Ed25519Key> Ed25519Key::Generate() {
  SecretString seed(std::string(kEd25519SeedSize, '\0'));
  if (RAND_priv_bytes(reinterpret_cast<unsigned char*>(const_cast<char*>(seed.str().data())),
                      kEd25519SeedSize) != 1) {
    return OpenSslError("RAND_priv_bytes");
  }
  return FromSeed(seed.view());
}

Result<Ed25519Key> Ed25519Key::FromSeed(std::string_view seed) {
  if (seed.size() != kEd25519SeedSize) {
    return Error(ErrorCode::kCorrupt, "Ed25519 seed must be 32 bytes, got " + std::to_string(seed.size()));
  }
  EVP_PKEY* pkey = EVP_PKEY_new_raw_private_key(
      EVP_PKEY_ED25519, nullptr, reinterpret_cast<const unsigned char*>(seed.data()), seed.size());
  if (!pkey) return OpenSslError("EVP_PKEY_new_raw_private_key");
  Ed25519Key key(pkey);
  size_t len = kEd25519PublicSize;
  key.public_key_.assign(kEd25519PublicSize, '\0');
  if (EVP_PKEY_get_raw_public_key(pkey, reinterpret_cast<unsigned char*>(key.public_key_.data()),
                                  &len) != 1 ||
      len != kEd25519PublicSize) {
    return OpenSslError("EVP_PKEY_get_raw_public_key");
  }
  return key;
}

Result<SecretString> Ed25519Key::Seed() const {
  SecretString seed(std::string(kEd25519SeedSize, '\0'));
  size_t len = kEd25519SeedSize;
  if (EVP_PKEY_get_raw_private_key(
          pkey_, reinterpret_cast<unsigned char*>(const_cast<char*>(seed.str().data())), &len) != 1 ||
      len != kEd25519SeedSize) {
    return OpenSslError("EVP_PKEY_get_raw_private_key");
  }
  return seed;
}

std::string Ed25519Key::PublicKeyBlob() const {
  return SshWriter().String(kEd25519KeyType).String(public_key_).Take();
}

std::string Ed25519Key::AuthorizedKeysLine(std::string_view comment) const {
  std::string line = std::string(kEd25519KeyType) + " " + Base64Encode(PublicKeyBlob());
  if (!comment.empty()) line += " " + std::string(comment);
  return line;
}

std::string Ed25519Key::Fingerprint() const {
  std::string blob = PublicKeyBlob();
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(blob.data()), blob.size(), digest);
  std::string b64 = Base64Encode(std::string_view(reinterpret_cast<char*>(digest), sizeof digest));
  while (!b64.empty() && b64.back() == '=') b64.pop_back();
  return "SHA256:" + b64;
}

Result<std::string> Ed25519Key::SignRaw(std::string_view data) const {
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  if (!ctx) return OpenSslError("EVP_MD_CTX_new");
  std::string sig(kEd25519SignatureSize, '\0');
  size_t len = sig.size();
  bool ok = EVP_DigestSignInit(ctx, nullptr, nullptr, nullptr, pkey_) == 1 &&
            EVP_DigestSign(ctx, reinterpret_cast<unsigned char*>(sig.data()), &len,
                           reinterpret_cast<const unsigned char*>(data.data()), data.size()) == 1 &&
            len == kEd25519SignatureSize;
  EVP_MD_CTX_free(ctx);
  if (!ok) return OpenSslError("Ed25519 sign");
  return sig;
}

Result<std::string> Ed25519Key::SignBlob(std::string_view data) const {
  ASSIGN_OR_RETURN(std::string raw, SignRaw(data));
  return SshWriter().String(kEd25519KeyType).String(raw).Take();
}

Status VerifyEd25519Blob(std::string_view public_key, std::string_view data,
                         std::string_view signature_blob) {
  SshReader r(signature_blob);
  ASSIGN_OR_RETURN(std::string_view type, r.String(64));
  if (type != kEd25519KeyType) return Error(ErrorCode::kCorrupt, "signature is not ssh-ed25519");
  ASSIGN_OR_RETURN(std::string_view sig, r.String(kEd25519SignatureSize));
  RETURN_IF_ERROR(r.ExpectEnd("signature blob"));
  if (sig.size() != kEd25519SignatureSize || public_key.size() != kEd25519PublicSize) {
    return Error(ErrorCode::kCorrupt, "bad Ed25519 signature or key size");
  }
  EVP_PKEY* pkey = EVP_PKEY_new_raw_public_key(
      EVP_PKEY_ED25519, nullptr, reinterpret_cast<const unsigned char*>(public_key.data()),
      public_key.size());
  if (!pkey) return OpenSslError("EVP_PKEY_new_raw_public_key");
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  bool ok = ctx && EVP_DigestVerifyInit(ctx, nullptr, nullptr, nullptr, pkey) == 1 &&
            EVP_DigestVerify(ctx, reinterpret_cast<const unsigned char*>(sig.data()), sig.size(),
                             reinterpret_cast<const unsigned char*>(data.data()), data.size()) == 1;
  EVP_MD_CTX_free(ctx);
  EVP_PKEY_free(pkey);
  if (!ok) return Error(ErrorCode::kCorrupt, "Ed25519 signature does not verify");
  return OkStatus();
}

}  // namespace cloister::sshagent
