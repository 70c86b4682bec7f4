#include "aws/proxy_filter.h"

#include "aws/custody_filter.h"
#include "aws/proxy_head.h"
#include "base/strings.h"
#include "vault/credential.h"
#include "vault/crypto.h"

namespace cloister::aws {

AwsProxyFilter::AwsProxyFilter(AwsSecrets secrets, std::vector<std::string> scope,
                               std::shared_ptr<CredentialCustody> custody, std::string credential)
    : resigner_(secrets), credential_(std::move(credential)), token_(secrets.session_token),
      token_placeholder_(secrets.placeholder_token), scope_(std::move(scope)),
      custody_(std::move(custody)) {
  vault::SecureWipe(secrets.secret);
  vault::SecureWipe(secrets.session_token);
}

AwsProxyFilter::~AwsProxyFilter() { vault::SecureWipe(token_); }

bool AwsProxyFilter::Resigns(const RequestHead& a) const {
  // Unsigned requests (public objects) pass. Anything with an Authorization header, or a SigV4
  // query signature, must verify against the placeholder: SigV2/SigV4A and foreign keys are
  // refused by Resign().
  if (!LooksSigV4Signed(a) && a.Find("authorization") == nullptr) return false;
  // A minted token's placeholder (ECR registry, CodeArtifact): the CustodyFilter puts it back.
  if (custody_ && !LooksSigV4Signed(a)) {
    const std::string* authz = a.Find("authorization");
    if (authz && CarriesMintedToken(*authz, *custody_)) return false;
  }
  if (custody_ && LooksSigV4Signed(a)) {
    auto auth = ParseSigV4(a);
    // Signed with a minted credential's placeholder: the CustodyFilter re-signs it.
    if (auth.ok() && custody_->IsPlaceholderKeyId(auth->access_key_id)) return false;
  }
  return true;
}

std::vector<std::string> AwsProxyFilter::WouldSwap(const proxy::RequestHead& head) const {
  if (!vault::HostInAnyScope(head.host, scope_) || !Resigns(ToAws(head))) return {};
  return {credential_};
}

Result<proxy::ExtensionVerdict> AwsProxyFilter::OnRequestHead(proxy::RequestHead& head) {
  proxy::ExtensionVerdict verdict;
  if (!vault::HostInAnyScope(head.host, scope_)) return verdict;
  RequestHead a = ToAws(head);
  if (!Resigns(a)) return verdict;
  verdict.handled = true;
  // SECURITY: a request that does not verify with the placeholder is refused here (403).
  ASSIGN_OR_RETURN(Resigner::Verdict v, resigner_.Resign(a));
  FromAws(a, head);
  if (v.need_full_body) {
    verdict.need_full_body = true;
    verdict.max_body = kMaxFullBody;
  }
  if (v.chunks) verdict.body = ChunkBodyTransform(std::move(v.chunks));
  // The secret only signs; the session token goes out as it is (now, or with the held body).
  verdict.swapped.push_back({credential_, token_, token_placeholder_});
  return verdict;
}

Status AwsProxyFilter::OnFullBody(proxy::RequestHead& head, std::string_view body) {
  RequestHead a = ToAws(head);
  RETURN_IF_ERROR(resigner_.ResignWithBody(a, body));
  FromAws(a, head);
  return OkStatus();
}

AwsSecrets SecretsFor(const vault::BoundCredential& b) {
  const vault::Credential& c = b.credential;
  return AwsSecrets{c.aws_access_key_id, c.value, c.aws_session_token, b.placeholder,
                    c.aws_session_token.empty() ? std::string() : b.aws_token_placeholder};
}

}  // namespace cloister::aws
