#include "catalog/signing.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <memory>
#include <sstream>

#include "base/strings.h"
#include "catalog/catalog.h"
#include "catalog/sha256.h"

namespace cloister::catalog {
namespace {

struct PkeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
struct MdCtxFree {
  void operator()(EVP_MD_CTX* c) const { EVP_MD_CTX_free(c); }
};
struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
using Pkey = std::unique_ptr<EVP_PKEY, PkeyFree>;

Result<Pkey> PkeyFromPem(const std::string& pem) {
  std::unique_ptr<BIO, BioFree> bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  Pkey key(PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr));
  if (!key || EVP_PKEY_get_id(key.get()) != EVP_PKEY_ED25519) {
    return Error(ErrorCode::kCorrupt, "publisher key is not an Ed25519 PEM private key");
  }
  return key;
}

Result<std::string> RawPublic(EVP_PKEY* key) {
  unsigned char raw[32];
  size_t len = sizeof raw;
  if (EVP_PKEY_get_raw_public_key(key, raw, &len) != 1 || len != 32) {
    return Error(ErrorCode::kInternal, "cannot read the Ed25519 public key");
  }
  return std::string(reinterpret_cast<char*>(raw), len);
}

Result<std::string> PemOf(EVP_PKEY* key) {
  std::unique_ptr<BIO, BioFree> bio(BIO_new(BIO_s_mem()));
  if (PEM_write_bio_PrivateKey(bio.get(), key, nullptr, nullptr, 0, nullptr, nullptr) != 1) {
    return Error(ErrorCode::kInternal, "cannot encode the publisher key");
  }
  char* data = nullptr;
  long n = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<size_t>(n));
}

}  // namespace

std::string KeyIdOf(std::string_view raw_public_key) {
  return Sha256Hex(raw_public_key).substr(0, 32);
}

Result<PublisherKey> PublisherKey::Generate() {
  EVP_PKEY* raw = nullptr;
  std::unique_ptr<EVP_PKEY_CTX, void (*)(EVP_PKEY_CTX*)> ctx(
      EVP_PKEY_CTX_new_id(EVP_PKEY_ED25519, nullptr), EVP_PKEY_CTX_free);
  if (!ctx || EVP_PKEY_keygen_init(ctx.get()) != 1 || EVP_PKEY_keygen(ctx.get(), &raw) != 1) {
    return Error(ErrorCode::kInternal, "Ed25519 key generation failed");
  }
  Pkey key(raw);
  PublisherKey k;
  ASSIGN_OR_RETURN(k.private_pem_, PemOf(key.get()));
  ASSIGN_OR_RETURN(k.public_key_, RawPublic(key.get()));
  return k;
}

Result<PublisherKey> PublisherKey::LoadOrCreate(const std::string& path) {
  std::string dir = path.substr(0, path.rfind('/'));
  if (!dir.empty() && mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return ErrnoError("mkdir " + dir, errno);
  }
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0 && errno == ENOENT) {
    ASSIGN_OR_RETURN(PublisherKey k, Generate());
    // SECURITY: create exclusively with 0600 so the key is never readable by others, even briefly.
    std::string tmp = path + ".tmp";
    unlink(tmp.c_str());
    int wfd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (wfd < 0) return ErrnoError("create " + tmp, errno);
    bool ok = write(wfd, k.private_pem_.data(), k.private_pem_.size()) ==
                  static_cast<ssize_t>(k.private_pem_.size()) &&
              fsync(wfd) == 0;
    close(wfd);
    if (!ok) return ErrnoError("write " + tmp, errno);
    // link() fails if another process created the key meanwhile: then use theirs.
    if (link(tmp.c_str(), path.c_str()) != 0 && errno != EEXIST) {
      int e = errno;
      unlink(tmp.c_str());
      return ErrnoError("install " + path, e);
    }
    unlink(tmp.c_str());
    fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  }
  if (fd < 0) return ErrnoError("open " + path, errno);
  struct stat st;
  if (fstat(fd, &st) != 0 || (st.st_mode & 077) != 0) {
    close(fd);
    return Error(ErrorCode::kPermissionDenied, path + " is readable by other users",
                 "chmod 600 " + path);
  }
  std::string pem(static_cast<size_t>(st.st_size > 65536 ? 65536 : st.st_size), '\0');
  ssize_t n = read(fd, pem.data(), pem.size());
  close(fd);
  if (n < 0) return ErrnoError("read " + path, errno);
  pem.resize(static_cast<size_t>(n));
  ASSIGN_OR_RETURN(Pkey key, PkeyFromPem(pem));
  PublisherKey k;
  k.private_pem_ = std::move(pem);
  ASSIGN_OR_RETURN(k.public_key_, RawPublic(key.get()));
  return k;
}

Result<std::string> PublisherKey::Sign(std::string_view message) const {
  ASSIGN_OR_RETURN(Pkey key, PkeyFromPem(private_pem_));
  std::unique_ptr<EVP_MD_CTX, MdCtxFree> ctx(EVP_MD_CTX_new());
  unsigned char sig[64];
  size_t len = sizeof sig;
  if (!ctx || EVP_DigestSignInit(ctx.get(), nullptr, nullptr, nullptr, key.get()) != 1 ||
      EVP_DigestSign(ctx.get(), sig, &len, reinterpret_cast<const unsigned char*>(message.data()),
                     message.size()) != 1 ||
      len != 64) {
    return Error(ErrorCode::kInternal, "Ed25519 signing failed");
  }
  return std::string(reinterpret_cast<char*>(sig), len);
}

bool VerifyEd25519(std::string_view raw_public_key, std::string_view message,
                   std::string_view signature) {
  if (raw_public_key.size() != 32 || signature.size() != 64) return false;
  Pkey key(EVP_PKEY_new_raw_public_key(
      EVP_PKEY_ED25519, nullptr, reinterpret_cast<const unsigned char*>(raw_public_key.data()),
      raw_public_key.size()));
  if (!key) return false;
  std::unique_ptr<EVP_MD_CTX, MdCtxFree> ctx(EVP_MD_CTX_new());
  if (!ctx || EVP_DigestVerifyInit(ctx.get(), nullptr, nullptr, nullptr, key.get()) != 1) {
    return false;
  }
  return EVP_DigestVerify(ctx.get(), reinterpret_cast<const unsigned char*>(signature.data()),
                          signature.size(),
                          reinterpret_cast<const unsigned char*>(message.data()),
                          message.size()) == 1;
}

std::string SerializeSignature(const SignatureFile& s) {
  return std::string(kSignatureFormat) + " ed25519 " + s.key_id + " " + HexEncode(s.signature) +
         "\n";
}

Result<SignatureFile> ParseSignature(std::string_view text) {
  // SECURITY: untrusted input; fixed shape, bounded.
  if (text.size() > 512) return Rejected(Rejection::kBadSignature, "signature file too large");
  std::string t(text);
  if (!t.empty() && t.back() == '\n') t.pop_back();
  std::vector<std::string> parts = Split(t, ' ');
  if (parts.size() != 4 || parts[0] != kSignatureFormat || parts[1] != "ed25519") {
    return Rejected(Rejection::kBadSignature, "signature file is not \"" +
                                                  std::string(kSignatureFormat) +
                                                  " ed25519 KEYID SIGNATURE\"");
  }
  SignatureFile s;
  s.key_id = parts[2];
  auto id = HexDecode(s.key_id);
  if (!id.ok() || id->size() != 16 || ToLower(s.key_id) != s.key_id) {
    return Rejected(Rejection::kBadSignature, "malformed key id in signature file");
  }
  auto sig = HexDecode(parts[3]);
  if (!sig.ok() || sig->size() != 64) {
    return Rejected(Rejection::kBadSignature, "signature is not 64 bytes of hex");
  }
  s.signature = *sig;
  return s;
}

}  // namespace cloister::catalog
