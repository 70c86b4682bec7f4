#include "proxy/ca.h"

#include <arpa/inet.h>
#include <openssl/bio.h>
#include <openssl/ec.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509v3.h>

#include <ctime>

#include "base/strings.h"
#include "vault/keys.h"

namespace cloister::proxy {
namespace {

constexpr size_t kMaxCachedLeaves = 4096;

struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};

Error SslError(const std::string& what) {
  return Error(ErrorCode::kInternal, what + " failed (OpenSSL)");
}

std::string PkeyToPem(EVP_PKEY* key) {
  std::unique_ptr<BIO, BioFree> bio(BIO_new(BIO_s_mem()));
  PEM_write_bio_PrivateKey(bio.get(), key, nullptr, nullptr, 0, nullptr, nullptr);
  char* data = nullptr;
  long n = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<size_t>(n));
}

Status RandomSerial(X509* x) {
  unsigned char bytes[16];
  if (RAND_bytes(bytes, sizeof bytes) != 1) return SslError("RAND_bytes");
  bytes[0] &= 0x7f;  // positive
  BIGNUM* bn = BN_bin2bn(bytes, sizeof bytes, nullptr);
  bool ok = bn && BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(x)) != nullptr;
  BN_free(bn);
  return ok ? OkStatus() : SslError("serial");
}

bool AddExt(X509* cert, X509* issuer, int nid, const char* value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value);
  if (!ext) return false;
  bool ok = X509_add_ext(cert, ext, -1) == 1;
  X509_EXTENSION_free(ext);
  return ok;
}

bool IsIpLiteral(const std::string& host) {
  unsigned char buf[16];
  return inet_pton(AF_INET, host.c_str(), buf) == 1 || inet_pton(AF_INET6, host.c_str(), buf) == 1;
}

}  // namespace

Result<PkeyPtr> GenerateP256() {
  PkeyPtr key(EVP_EC_gen("P-256"));
  if (!key) return SslError("P-256 key generation");
  return key;
}

std::string CertToPem(X509* cert) {
  std::unique_ptr<BIO, BioFree> bio(BIO_new(BIO_s_mem()));
  PEM_write_bio_X509(bio.get(), cert);
  char* data = nullptr;
  long n = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<size_t>(n));
}

Status CertAuthority::Init() {
  ASSIGN_OR_RETURN(leaf_key_, GenerateP256());
  cert_pem_ = CertToPem(cert_.get());
  return OkStatus();
}

Result<std::shared_ptr<CertAuthority>> CertAuthority::CreateInMemory(const std::string& cn) {
  std::shared_ptr<CertAuthority> ca(new CertAuthority());
  ASSIGN_OR_RETURN(ca->ca_key_, GenerateP256());
  X509Ptr x(X509_new());
  if (!x) return SslError("X509_new");
  X509_set_version(x.get(), 2);
  RETURN_IF_ERROR(RandomSerial(x.get()));
  X509_gmtime_adj(X509_getm_notBefore(x.get()), -3600);
  X509_gmtime_adj(X509_getm_notAfter(x.get()), 10L * 365 * 24 * 3600);
  X509_NAME* name = X509_get_subject_name(x.get());
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_UTF8,
                             reinterpret_cast<const unsigned char*>(cn.c_str()), -1, -1, 0);
  X509_NAME_add_entry_by_txt(name, "O", MBSTRING_UTF8,
                             reinterpret_cast<const unsigned char*>("cloister"), -1, -1, 0);
  X509_set_issuer_name(x.get(), name);
  X509_set_pubkey(x.get(), ca->ca_key_.get());
  if (!AddExt(x.get(), x.get(), NID_basic_constraints, "critical,CA:TRUE,pathlen:0") ||
      !AddExt(x.get(), x.get(), NID_key_usage, "critical,keyCertSign,cRLSign") ||
      !AddExt(x.get(), x.get(), NID_subject_key_identifier, "hash") ||
      X509_sign(x.get(), ca->ca_key_.get(), EVP_sha256()) <= 0) {
    return SslError("CA certificate");
  }
  ca->cert_ = std::move(x);
  RETURN_IF_ERROR(ca->Init());
  return ca;
}

Result<std::shared_ptr<CertAuthority>> CertAuthority::LoadOrCreate(const std::string& keys_dir,
                                                                  const std::string& cn) {
  RETURN_IF_ERROR(vault::EnsurePrivateDir(keys_dir));
  std::string key_path = keys_dir + "/" + kCaKeyFile;
  std::string crt_path = keys_dir + "/" + kCaCertFile;
  auto key_pem = vault::ReadSmallFile(key_path, 64 << 10);
  if (!key_pem.ok() && key_pem.error().code() == ErrorCode::kNotFound) {
    ASSIGN_OR_RETURN(auto ca, CreateInMemory(cn));
    // SECURITY: the CA private key is written 0600 and never leaves the host.
    std::string pem = PkeyToPem(ca->ca_key_.get());
    RETURN_IF_ERROR(vault::WriteFileAtomic(key_path, pem, 0600));
    RETURN_IF_ERROR(vault::WriteFileAtomic(crt_path, ca->cert_pem_, 0644));
    return ca;
  }
  if (!key_pem.ok()) return key_pem.error();
  ASSIGN_OR_RETURN(std::string crt_pem, vault::ReadSmallFile(crt_path, 64 << 10));
  std::shared_ptr<CertAuthority> ca(new CertAuthority());
  std::unique_ptr<BIO, BioFree> kb(BIO_new_mem_buf(key_pem->data(), static_cast<int>(key_pem->size())));
  ca->ca_key_.reset(PEM_read_bio_PrivateKey(kb.get(), nullptr, nullptr, nullptr));
  std::unique_ptr<BIO, BioFree> cb(BIO_new_mem_buf(crt_pem.data(), static_cast<int>(crt_pem.size())));
  ca->cert_.reset(PEM_read_bio_X509(cb.get(), nullptr, nullptr, nullptr));
  if (!ca->ca_key_ || !ca->cert_ || X509_check_private_key(ca->cert_.get(), ca->ca_key_.get()) != 1) {
    return Error(ErrorCode::kCorrupt, "proxy CA files in " + keys_dir + " are unreadable or mismatched",
                 "remove " + key_path + " and " + crt_path + " to make a new CA (guests pick it up "
                 "at their next boot)");
  }
  RETURN_IF_ERROR(ca->Init());
  return ca;
}

Result<X509Ptr> CertAuthority::Mint(const std::string& host) {
  X509Ptr x(X509_new());
  if (!x) return SslError("X509_new");
  X509_set_version(x.get(), 2);
  RETURN_IF_ERROR(RandomSerial(x.get()));
  X509_gmtime_adj(X509_getm_notBefore(x.get()), -3600);
  X509_gmtime_adj(X509_getm_notAfter(x.get()), 30L * 24 * 3600);
  X509_NAME* name = X509_get_subject_name(x.get());
  std::string cn = host.substr(0, 64);
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_UTF8,
                             reinterpret_cast<const unsigned char*>(cn.c_str()), -1, -1, 0);
  X509_set_issuer_name(x.get(), X509_get_subject_name(cert_.get()));
  X509_set_pubkey(x.get(), leaf_key_.get());
  std::string san = (IsIpLiteral(host) ? "IP:" : "DNS:") + host;
  if (!AddExt(x.get(), cert_.get(), NID_subject_alt_name, san.c_str()) ||
      !AddExt(x.get(), cert_.get(), NID_basic_constraints, "critical,CA:FALSE") ||
      !AddExt(x.get(), cert_.get(), NID_key_usage, "critical,digitalSignature") ||
      !AddExt(x.get(), cert_.get(), NID_ext_key_usage, "serverAuth") ||
      !AddExt(x.get(), cert_.get(), NID_authority_key_identifier, "keyid:always") ||
      X509_sign(x.get(), ca_key_.get(), EVP_sha256()) <= 0) {
    return SslError("leaf certificate for " + host);
  }
  return x;
}

Result<X509Ptr> CertAuthority::Leaf(const std::string& host_in) {
  std::string host = ToLower(host_in);
  if (host.empty() || host.size() > 253) {
    return Error(ErrorCode::kInvalidArgument, "bad host name for a certificate");
  }
  std::lock_guard<std::mutex> lock(mu_);
  auto it = cache_.find(host);
  if (it != cache_.end()) {
    X509_up_ref(it->second.get());
    return X509Ptr(it->second.get());
  }
  ASSIGN_OR_RETURN(X509Ptr x, Mint(host));
  if (cache_.size() >= kMaxCachedLeaves) cache_.clear();  // holders keep their own references
  X509_up_ref(x.get());
  X509Ptr mine(x.get());
  cache_.emplace(host, std::move(x));
  return mine;
}

Result<std::string> CertAuthority::LeafPem(const std::string& host) {
  ASSIGN_OR_RETURN(X509Ptr x, Leaf(host));
  return CertToPem(x.get());
}

std::string CertAuthority::LeafKeyPem() const { return PkeyToPem(leaf_key_.get()); }

}  // namespace cloister::proxy
