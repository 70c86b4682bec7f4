// AWS credential custody as a filter of the egress proxy (proxy/extension_filter.h). One per proxy, added
// last by AddAwsFilters (after the workspace's re-signing filters) and holding the proxy's
// CredentialCustody (custody.h).
//
// For a TLS-intercepted request it
//   1. puts back the real token for a minted token's placeholder in `Authorization: Basic` (the
//      password of "user:password") or `Authorization: Bearer`, only toward the hosts the token was
//      minted for (ECR registry, CodeArtifact repositories); expired: 403;
//   2. for a host in the AWS scope, re-signs a request the guest signed with a minted placeholder
//      key id (and placeholder session token) with the minted secret and real token (Resigner);
//      one signed with that key id but anything else is refused (403); expired: 403 with the hint;
//   3. for a credential-vending service (vending.h), refuses actions that cannot be taken into
//      custody (before they reach AWS: for Query-protocol POSTs it holds the form body to read its
//      Action), and attaches a ResponseTransform that holds the 2xx response (<= 1 MiB), takes
//      what it mints into custody, hands the guest the same document with placeholders, and
//      writes a trace record naming each minted credential (placeholder id, kind, expiry).
//      What cannot be taken into custody is refused: 502 with the reason, nothing forwarded.
//
// Thread safe (the custody is; the filter itself is immutable).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "aws/custody.h"
#include "aws/vending.h"
#include "proxy/extension_filter.h"

namespace cloister::aws {

// The name the trace and the response redaction give the minted values this filter puts back.
inline constexpr char kMintedValues[] = "aws:minted";

class CustodyFilter : public proxy::ExtensionFilter {
 public:
  // `scope`: the AWS hosts (exact or subdomain) whose requests may be re-signed and whose vending
  // responses are taken into custody (the union of the workspace's AWS credential scopes).
  CustodyFilter(std::shared_ptr<CredentialCustody> custody, std::vector<std::string> scope);
  Result<proxy::ExtensionVerdict> OnRequestHead(proxy::RequestHead& head) override;
  Status OnFullBody(proxy::RequestHead& head, std::string_view body) override;

  const std::shared_ptr<CredentialCustody>& custody() const { return custody_; }

 private:
  std::shared_ptr<CredentialCustody> custody_;
  std::vector<std::string> scope_;
};

// True when `authorization` (a request's Authorization value) is Basic or Bearer carrying the
// placeholder of a minted token in `custody` (the workspace's re-signer leaves such requests to
// the CustodyFilter instead of refusing a non-SigV4 Authorization).
bool CarriesMintedToken(std::string_view authorization, CredentialCustody& custody);

// The response side of one vending call (exposed for tests; made by CustodyFilter).
class CustodyResponse : public proxy::ResponseTransform {
 public:
  CustodyResponse(std::shared_ptr<CredentialCustody> custody, VendingCall call, std::string method,
                  std::string path);
  Result<proxy::ResponseHold> OnHead(proxy::ResponseHead& head) override;
  Result<std::string> OnBody(proxy::ResponseHead& head, std::string body) override;

 private:
  std::shared_ptr<CredentialCustody> custody_;
  VendingCall call_;
  std::string method_, path_;
};

}  // namespace cloister::aws
