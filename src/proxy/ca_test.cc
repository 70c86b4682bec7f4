// The per-install CA: its key stays private on disk and stable across loads; leaves are minted on
// demand for the asked name only, all on one P-256 key, signed by the CA, and cached.
#include "proxy/ca.h"

#include <gtest/gtest.h>
#include <openssl/ec.h>
#include <openssl/obj_mac.h>
#include <openssl/x509v3.h>
#include <sys/stat.h>

#include <filesystem>

namespace cloister::proxy {
namespace {

std::vector<std::string> SanEntries(X509* x) {
  std::vector<std::string> out;
  auto* names = static_cast<GENERAL_NAMES*>(X509_get_ext_d2i(x, NID_subject_alt_name, nullptr, nullptr));
  if (!names) return out;
  for (int i = 0; i < sk_GENERAL_NAME_num(names); ++i) {
    GENERAL_NAME* n = sk_GENERAL_NAME_value(names, i);
    if (n->type == GEN_DNS) {
      out.push_back("DNS:" + std::string(reinterpret_cast<const char*>(ASN1_STRING_get0_data(n->d.dNSName)),
                                         ASN1_STRING_length(n->d.dNSName)));
    } else if (n->type == GEN_IPADD) {
      out.push_back("IP:" + std::to_string(ASN1_STRING_length(n->d.iPAddress)) + "bytes");
    }
  }
  GENERAL_NAMES_free(names);
  return out;
}

TEST(CaTest, KeyFileIsPrivateAndTheCaIsStableAcrossLoads) {
  char tmpl[] = "/tmp/cloister-ca-XXXXXX";
  std::string dir = std::string(mkdtemp(tmpl)) + "/keys";
  auto first = CertAuthority::LoadOrCreate(dir);
  ASSERT_TRUE(first.ok()) << first.error().ToString();
  struct stat st {};
  ASSERT_EQ(stat((dir + "/" + kCaKeyFile).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  ASSERT_EQ(stat(dir.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 077, 0u);  // the keys directory is private too
  auto again = CertAuthority::LoadOrCreate(dir);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ((*again)->cert_pem(), (*first)->cert_pem());
  // The certificate the guest gets is public; the key is not in it.
  EXPECT_EQ((*first)->cert_pem().find("PRIVATE KEY"), std::string::npos);
  std::filesystem::remove_all(std::filesystem::path(dir).parent_path());
}

TEST(CaTest, LeavesOnDemandOnOneP256KeySignedByTheCaAndCached) {
  auto ca = CertAuthority::CreateInMemory("test CA");
  ASSERT_TRUE(ca.ok());
  auto a1 = (*ca)->Leaf("API.Anthropic.com");
  auto a2 = (*ca)->Leaf("api.anthropic.com");
  auto b = (*ca)->Leaf("api.github.com");
  auto ip = (*ca)->Leaf("127.0.0.1");
  ASSERT_TRUE(a1.ok() && a2.ok() && b.ok() && ip.ok());
  // Cached: the same certificate object for the same (case-folded) name.
  EXPECT_EQ(a1->get(), a2->get());
  EXPECT_NE(a1->get(), b->get());
  // SAN is exactly the asked name (no wildcard), an IP literal gets an IP SAN.
  EXPECT_EQ(SanEntries(a1->get()), std::vector<std::string>{"DNS:api.anthropic.com"});
  EXPECT_EQ(SanEntries(b->get()), std::vector<std::string>{"DNS:api.github.com"});
  EXPECT_EQ(SanEntries(ip->get()), std::vector<std::string>{"IP:4bytes"});
  // One key for every leaf: P-256, and it is the certificate's key.
  EVP_PKEY* key = (*ca)->leaf_key();
  char group[64] = {0};
  size_t glen = 0;
  ASSERT_EQ(EVP_PKEY_get_group_name(key, group, sizeof group, &glen), 1);
  EXPECT_STREQ(group, "prime256v1");
  EXPECT_EQ(EVP_PKEY_eq(X509_get0_pubkey(a1->get()), key), 1);
  EXPECT_EQ(EVP_PKEY_eq(X509_get0_pubkey(b->get()), key), 1);
  // Signed by the CA and valid as a server certificate for that name.
  X509_STORE* store = X509_STORE_new();
  X509_STORE_add_cert(store, (*ca)->cert());
  X509_STORE_CTX* ctx = X509_STORE_CTX_new();
  X509_STORE_CTX_init(ctx, store, a1->get(), nullptr);
  X509_VERIFY_PARAM_set1_host(X509_STORE_CTX_get0_param(ctx), "api.anthropic.com", 0);
  X509_STORE_CTX_set_purpose(ctx, X509_PURPOSE_SSL_SERVER);
  EXPECT_EQ(X509_verify_cert(ctx), 1) << X509_verify_cert_error_string(X509_STORE_CTX_get_error(ctx));
  X509_STORE_CTX_free(ctx);
  // ...and for no other name.
  ctx = X509_STORE_CTX_new();
  X509_STORE_CTX_init(ctx, store, a1->get(), nullptr);
  X509_VERIFY_PARAM_set1_host(X509_STORE_CTX_get0_param(ctx), "evil.test", 0);
  EXPECT_NE(X509_verify_cert(ctx), 1);
  X509_STORE_CTX_free(ctx);
  X509_STORE_free(store);
}

}  // namespace
}  // namespace cloister::proxy
