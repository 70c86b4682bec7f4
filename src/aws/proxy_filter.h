// The AWS re-signer as a filter of the egress proxy (proxy/extension_filter.h), and the per-boot wiring of a
// workspace's AWS credentials into the proxy's configuration.
//
// One filter per AWS credential of the workspace. For a TLS-intercepted request whose host is in
// the credential's scope (exact or subdomain, default "amazonaws.com") and that carries a SigV4
// signature made with that credential's access key id, it calls Resigner (resigner.h): the request
// goes upstream re-signed with the real secret, or is refused with 403 when the guest did not sign
// it with the placeholder secret (and placeholder session token). Requests to other hosts, and
// unsigned requests (public S3 objects), pass untouched. A request signed with the placeholder key
// id of a credential in custody (custody.h), or whose Basic/Bearer Authorization carries a minted
// token's placeholder, is left to the CustodyFilter.
//
// Thread safe: one instance serves every proxy thread (Resigner is immutable).
// SECURITY: holds the real secret and session token (inside Resigner); nothing here logs them.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "aws/custody.h"
#include "aws/resigner.h"
#include "proxy/extension_filter.h"
#include "proxy/proxy.h"
#include "vault/vault.h"

namespace cloister::aws {

// The credential id under which the session token's placeholder is registered with the proxy
// (so that it trips the compromise detector anywhere outside the AWS scope).
inline constexpr char kSessionTokenId[] = "aws:session-token";

class AwsProxyFilter : public proxy::ExtensionFilter {
 public:
  // `scope`: lower-case host names; a request host matches one exactly or as a subdomain.
  // `credential`: the vault credential's id (what consent asks about and the trace names).
  AwsProxyFilter(AwsSecrets secrets, std::vector<std::string> scope,
                 std::shared_ptr<CredentialCustody> custody = nullptr,
                 std::string credential = "aws");
  ~AwsProxyFilter() override;
  // The credential, for every request this filter re-signs: in scope and signed (or carrying an
  // Authorization header), and not one of a minted credential's (the CustodyFilter's).
  std::vector<std::string> WouldSwap(const proxy::RequestHead& head) const override;
  Result<proxy::ExtensionVerdict> OnRequestHead(proxy::RequestHead& head) override;
  Status OnFullBody(proxy::RequestHead& head, std::string_view body) override;

 private:
  bool Resigns(const RequestHead& a) const;
  Resigner resigner_;
  std::string credential_;
  // SECURITY: the real session token the re-signed request carries, and its placeholder: the
  // verdict reports them (the answer is redacted of the token).
  std::string token_, token_placeholder_;
  std::vector<std::string> scope_;
  std::shared_ptr<CredentialCustody> custody_;  // may be null
};

// The secrets of a bound kAws credential (vault::Vault::Bind()).
// SECURITY: the result holds the real secret and token.
AwsSecrets SecretsFor(const vault::BoundCredential& b);

// Per boot, in the supervisor, after `cfg.credentials = vault.Bind()`: for every kAws credential
// in cfg.credentials, appends an AwsProxyFilter to cfg.extension_filters and, when the credential has a
// session token, a credential entry for the token's placeholder (id kSessionTokenId, kind kAws,
// same scope; kAws substitutes no header, so the filter sees what the guest signed). When there is
// at least one, it also appends one CustodyFilter (custody_filter.h) with a new CredentialCustody
// over the union of their scopes, after them; minted credentials are traced to cfg.trace (set it
// before this call). Returns how many AWS credentials were wired. Call it once per config.
Result<int> AddAwsFilters(proxy::ProxyConfig& cfg);

}  // namespace cloister::aws
