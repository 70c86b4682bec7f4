#include "sshagent/host_key.h"

#include <openssl/bn.h>
#include <openssl/core_names.h>
#include <openssl/ec.h>
#include <openssl/evp.h>
#include <openssl/param_build.h>
#include <openssl/sha.h>

#include <cctype>
#include <memory>

#include "sshagent/ed25519_key.h"
#include "sshagent/wire.h"

namespace cloister::sshagent {
namespace {

Error Bad(const std::string& why) { return Error(ErrorCode::kCorrupt, "host key: " + why); }

struct Ecdsa {
  std::string_view type, curve, group;
  const EVP_MD* (*md)();
  size_t point;  // uncompressed point size
};
const Ecdsa kEcdsa[] = {
    {"ecdsa-sha2-nistp256", "nistp256", "P-256", EVP_sha256, 65},
    {"ecdsa-sha2-nistp384", "nistp384", "P-384", EVP_sha384, 97},
    {"ecdsa-sha2-nistp521", "nistp521", "P-521", EVP_sha512, 133},
};

// An SSH mpint as a positive big-endian magnitude (leading zero stripped); refuses negatives.
Result<std::string_view> PositiveMpint(SshReader& r, size_t max) {
  ASSIGN_OR_RETURN(std::string_view v, r.String(max));
  if (v.empty() || (static_cast<unsigned char>(v[0]) & 0x80) != 0) return Bad("bad integer");
  while (!v.empty() && v[0] == '\0') v.remove_prefix(1);
  if (v.empty()) return Bad("zero integer");
  return v;
}

using PkeyPtr = std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)>;
using BnPtr = std::unique_ptr<BIGNUM, decltype(&BN_free)>;

BnPtr Bn(std::string_view be) {
  return BnPtr(BN_bin2bn(reinterpret_cast<const unsigned char*>(be.data()),
                         static_cast<int>(be.size()), nullptr),
               BN_free);
}

Result<PkeyPtr> FromData(const char* type, OSSL_PARAM_BLD* bld) {
  OSSL_PARAM* params = OSSL_PARAM_BLD_to_param(bld);
  EVP_PKEY_CTX* ctx = EVP_PKEY_CTX_new_from_name(nullptr, type, nullptr);
  EVP_PKEY* pkey = nullptr;
  bool ok = params && ctx && EVP_PKEY_fromdata_init(ctx) == 1 &&
            EVP_PKEY_fromdata(ctx, &pkey, EVP_PKEY_PUBLIC_KEY, params) == 1;
  EVP_PKEY_CTX_free(ctx);
  OSSL_PARAM_free(params);
  if (!ok) return Bad("OpenSSL refused the key");
  return PkeyPtr(pkey, EVP_PKEY_free);
}

Status VerifyDigest(EVP_PKEY* pkey, const EVP_MD* md, std::string_view data, std::string_view sig) {
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  if (!ctx) return Bad("out of memory");
  bool ok = EVP_DigestVerifyInit(ctx, nullptr, md, nullptr, pkey) == 1 &&
            EVP_DigestVerify(ctx, reinterpret_cast<const unsigned char*>(sig.data()), sig.size(),
                             reinterpret_cast<const unsigned char*>(data.data()), data.size()) == 1;
  EVP_MD_CTX_free(ctx);
  return ok ? OkStatus() : Bad("signature does not verify");
}

Status VerifyEcdsa(const Ecdsa& e, std::string_view point, std::string_view data,
                   std::string_view sig_body) {
  // sig_body: mpint r, mpint s -> DER ECDSA-Sig-Value for OpenSSL.
  SshReader r(sig_body);
  ASSIGN_OR_RETURN(std::string_view rv, PositiveMpint(r, 80));
  ASSIGN_OR_RETURN(std::string_view sv, PositiveMpint(r, 80));
  RETURN_IF_ERROR(r.ExpectEnd("ECDSA signature"));
  ECDSA_SIG* es = ECDSA_SIG_new();
  BIGNUM* br = BN_bin2bn(reinterpret_cast<const unsigned char*>(rv.data()), static_cast<int>(rv.size()), nullptr);
  BIGNUM* bs = BN_bin2bn(reinterpret_cast<const unsigned char*>(sv.data()), static_cast<int>(sv.size()), nullptr);
  if (!es || !br || !bs || ECDSA_SIG_set0(es, br, bs) != 1) {
    BN_free(br);
    BN_free(bs);
    ECDSA_SIG_free(es);
    return Bad("bad ECDSA signature");
  }
  unsigned char* der = nullptr;
  int der_len = i2d_ECDSA_SIG(es, &der);
  ECDSA_SIG_free(es);
  if (der_len <= 0) return Bad("bad ECDSA signature");
  std::string der_sig(reinterpret_cast<char*>(der), static_cast<size_t>(der_len));
  OPENSSL_free(der);

  OSSL_PARAM_BLD* bld = OSSL_PARAM_BLD_new();
  if (!bld) return Bad("out of memory");
  OSSL_PARAM_BLD_push_utf8_string(bld, OSSL_PKEY_PARAM_GROUP_NAME, e.group.data(), 0);
  OSSL_PARAM_BLD_push_octet_string(bld, OSSL_PKEY_PARAM_PUB_KEY, point.data(), point.size());
  auto pkey = FromData("EC", bld);
  OSSL_PARAM_BLD_free(bld);
  if (!pkey.ok()) return pkey.error();
  return VerifyDigest(pkey->get(), e.md(), data, der_sig);
}

Status VerifyRsa(std::string_view e, std::string_view n, const EVP_MD* md, std::string_view data,
                 std::string_view sig) {
  BnPtr be = Bn(e), bn = Bn(n);
  OSSL_PARAM_BLD* bld = OSSL_PARAM_BLD_new();
  if (!bld || !be || !bn) {
    OSSL_PARAM_BLD_free(bld);
    return Bad("out of memory");
  }
  OSSL_PARAM_BLD_push_BN(bld, OSSL_PKEY_PARAM_RSA_N, bn.get());
  OSSL_PARAM_BLD_push_BN(bld, OSSL_PKEY_PARAM_RSA_E, be.get());
  auto pkey = FromData("RSA", bld);
  OSSL_PARAM_BLD_free(bld);
  if (!pkey.ok()) return pkey.error();
  return VerifyDigest(pkey->get(), md, data, sig);
}

// The parsed public half of a host key blob.
struct ParsedKey {
  std::string type;
  std::string_view a, b;  // ed25519: a = pk; ecdsa: a = point; rsa: a = e, b = n
  const Ecdsa* ecdsa = nullptr;
};

Result<ParsedKey> Parse(std::string_view blob) {
  if (blob.size() > kMaxHostKeyBlob) return Bad("too long");
  SshReader r(blob);
  ASSIGN_OR_RETURN(std::string_view type, r.String(64));
  ParsedKey k;
  k.type = std::string(type);
  if (type == kEd25519KeyType) {
    ASSIGN_OR_RETURN(k.a, r.String(kEd25519PublicSize));
    if (k.a.size() != kEd25519PublicSize) return Bad("bad Ed25519 key size");
  } else if (type == "ssh-rsa") {
    ASSIGN_OR_RETURN(k.a, PositiveMpint(r, 16));
    ASSIGN_OR_RETURN(k.b, PositiveMpint(r, 2049));  // up to 16384-bit moduli
    if (k.b.size() < 256) return Bad("RSA key shorter than 2048 bits");
  } else {
    for (const Ecdsa& e : kEcdsa) {
      if (type == e.type) k.ecdsa = &e;
    }
    if (!k.ecdsa) return Bad("unsupported host key type (certificates and security keys are not)");
    ASSIGN_OR_RETURN(std::string_view curve, r.String(16));
    if (curve != k.ecdsa->curve) return Bad("ECDSA curve does not match its type");
    ASSIGN_OR_RETURN(k.a, r.String(k.ecdsa->point));
    if (k.a.size() != k.ecdsa->point || k.a[0] != '\x04') return Bad("bad ECDSA point");
  }
  RETURN_IF_ERROR(r.ExpectEnd("host key"));
  return k;
}

}  // namespace

Result<std::string> HostKeyType(std::string_view key_blob) {
  ASSIGN_OR_RETURN(ParsedKey k, Parse(key_blob));
  return k.type;
}

Status VerifyHostKeySignature(std::string_view key_blob, std::string_view data,
                              std::string_view signature_blob) {
  // SECURITY: key, data and signature are the guest's; a failure of any check is a refusal.
  ASSIGN_OR_RETURN(ParsedKey k, Parse(key_blob));
  if (k.type == kEd25519KeyType) return VerifyEd25519Blob(k.a, data, signature_blob);
  SshReader r(signature_blob);
  ASSIGN_OR_RETURN(std::string_view alg, r.String(64));
  ASSIGN_OR_RETURN(std::string_view sig, r.String(4096));
  RETURN_IF_ERROR(r.ExpectEnd("signature blob"));
  if (k.ecdsa) {
    if (alg != k.ecdsa->type) return Bad("signature algorithm does not match the key");
    return VerifyEcdsa(*k.ecdsa, k.a, data, sig);
  }
  // ssh-rsa key: SHA-2 signatures only.
  const EVP_MD* md = alg == "rsa-sha2-256" ? EVP_sha256() : alg == "rsa-sha2-512" ? EVP_sha512() : nullptr;
  if (!md) return Bad("RSA signature algorithm '" + std::string(alg) + "' is not rsa-sha2-256/512");
  return VerifyRsa(k.a, k.b, md, data, sig);
}

Result<std::string> HostKeyLine(std::string_view key_blob) {
  ASSIGN_OR_RETURN(ParsedKey k, Parse(key_blob));
  return k.type + " " + Base64Encode(key_blob);
}

Result<std::string> HostKeyBlobFromLine(std::string_view line) {
  size_t sp = line.find(' ');
  if (sp == std::string_view::npos) return Bad("'" + std::string(line.substr(0, 40)) + "' is not 'TYPE BASE64'");
  std::string_view type = line.substr(0, sp), b64 = line.substr(sp + 1);
  if (b64.empty() || b64.size() % 4 != 0 || b64.size() > 4 * (kMaxHostKeyBlob / 3 + 1)) {
    return Bad("bad base64");
  }
  for (char c : b64) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '+' || c == '/' || c == '=')) {
      return Bad("bad base64");
    }
  }
  std::string out(b64.size() / 4 * 3, '\0');
  int n = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                          reinterpret_cast<const unsigned char*>(b64.data()), static_cast<int>(b64.size()));
  if (n < 0) return Bad("bad base64");
  size_t pad = (b64.back() == '=') + (b64.size() > 1 && b64[b64.size() - 2] == '=');
  out.resize(static_cast<size_t>(n) - pad);
  ASSIGN_OR_RETURN(ParsedKey k, Parse(out));
  if (k.type != type) return Bad("type '" + std::string(type) + "' does not match the key");
  if (Base64Encode(out) != b64) return Bad("non-canonical base64");
  return out;
}

std::string HostKeyFingerprint(std::string_view key_blob) {
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(key_blob.data()), key_blob.size(), digest);
  std::string b64 = Base64Encode(std::string_view(reinterpret_cast<char*>(digest), sizeof digest));
  while (!b64.empty() && b64.back() == '=') b64.pop_back();
  return "SHA256:" + b64;
}

}  // namespace cloister::sshagent
