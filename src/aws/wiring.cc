// AddAwsFilters (proxy_filter.h): the per-boot wiring. In its own file so that users of the
// filters alone (the sigv4 fuzz target) do not pull the proxy's trace sink in.
#include <algorithm>

#include "aws/custody_filter.h"
#include "aws/proxy_filter.h"
#include "vault/credential.h"

namespace cloister::aws {

Result<int> AddAwsFilters(proxy::ProxyConfig& cfg) {
  std::vector<vault::BoundCredential> tokens;
  std::vector<std::string> scope;
  std::shared_ptr<proxy::TraceSink> trace = cfg.trace;
  ASSIGN_OR_RETURN(std::shared_ptr<CredentialCustody> custody,
                   CredentialCustody::Create([trace](const proxy::TraceRecord& rec) {
                     if (trace) trace->Write(rec);
                   }));
  int n = 0;
  for (const vault::BoundCredential& b : cfg.credentials) {
    const vault::Credential& c = b.credential;
    if (c.kind != vault::CredentialKind::kAws || c.id == kSessionTokenId) continue;
    if (c.aws_access_key_id.empty()) {
      return Error(ErrorCode::kInvalidArgument, "AWS credential " + c.id + " has no access key id");
    }
    if (!c.aws_session_token.empty()) {
      if (b.aws_token_placeholder.empty() || b.aws_token_placeholder == c.aws_session_token) {
        return Error(ErrorCode::kInvalidArgument,
                     "AWS credential " + c.id + " has a session token but no placeholder for it");
      }
      vault::BoundCredential t;
      t.credential.kind = vault::CredentialKind::kAws;
      t.credential.id = kSessionTokenId;
      t.credential.value = c.aws_session_token;  // SECURITY: real token, memory only
      t.credential.hosts = c.hosts;
      t.placeholder = b.aws_token_placeholder;
      tokens.push_back(std::move(t));
    }
    cfg.extension_filters.push_back(
        std::make_shared<AwsProxyFilter>(SecretsFor(b), c.hosts, custody, c.id));
    for (const std::string& h : c.hosts) {
      if (std::find(scope.begin(), scope.end(), h) == scope.end()) scope.push_back(h);
    }
    ++n;
  }
  if (n > 0) cfg.extension_filters.push_back(std::make_shared<CustodyFilter>(custody, scope));
  for (auto& t : tokens) cfg.credentials.push_back(std::move(t));
  return n;
}

}  // namespace cloister::aws
