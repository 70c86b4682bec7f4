// The per-install certificate authority the guest trusts, and on-demand leaf certificates.
//
// Files: <keys>/proxy-ca.key (P-256 private key, PEM, 0600) and <keys>/proxy-ca.crt (PEM, public;
// the guest gets this one on the metadata disk). The CA key never leaves the host.
//
// Leaf certificates: one P-256 key per CertAuthority, generated at load and reused for every host;
// a certificate per host name is minted on first use (SAN = the name, 30 days) and cached. Thread
// safe: Leaf() may be called from every proxy thread.
#pragma once

#include <openssl/evp.h>
#include <openssl/x509.h>

#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "base/result.h"

namespace cloister::proxy {

inline constexpr char kCaKeyFile[] = "proxy-ca.key";
inline constexpr char kCaCertFile[] = "proxy-ca.crt";

struct X509Free {
  void operator()(X509* x) const { X509_free(x); }
};
struct PkeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
using X509Ptr = std::unique_ptr<X509, X509Free>;
using PkeyPtr = std::unique_ptr<EVP_PKEY, PkeyFree>;

class CertAuthority {
 public:
  // Loads <keys_dir>/proxy-ca.{key,crt}, creating them (CN = common_name) on first use.
  static Result<std::shared_ptr<CertAuthority>> LoadOrCreate(const std::string& keys_dir,
                                                              const std::string& common_name =
                                                                  "cloister proxy CA");
  // A CA that lives only in memory (tests, and the tests' fake upstream CA).
  static Result<std::shared_ptr<CertAuthority>> CreateInMemory(const std::string& common_name);

  const std::string& cert_pem() const { return cert_pem_; }
  X509* cert() const { return cert_.get(); }

  // The shared leaf key (P-256).
  EVP_PKEY* leaf_key() const { return leaf_key_.get(); }
  // The cached certificate for `host` (a DNS name or an IP literal), minted if absent. The
  // caller owns one reference to it.
  Result<X509Ptr> Leaf(const std::string& host);
  // PEM of the leaf key and of Leaf(host) (tests: give a fake upstream its certificate).
  Result<std::string> LeafPem(const std::string& host);
  std::string LeafKeyPem() const;

 private:
  CertAuthority() = default;
  Status Init();
  Result<X509Ptr> Mint(const std::string& host);

  PkeyPtr ca_key_;
  X509Ptr cert_;
  std::string cert_pem_;
  PkeyPtr leaf_key_;
  std::mutex mu_;
  std::map<std::string, X509Ptr> cache_;  // guarded by mu_; bounded (cleared when full)
};

// Generates a P-256 key.
Result<PkeyPtr> GenerateP256();
std::string CertToPem(X509* cert);

}  // namespace cloister::proxy
