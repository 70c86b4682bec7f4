#include "aws/custody_filter.h"

#include <chrono>

#include "aws/proxy_head.h"
#include "aws/resigner.h"
#include "aws/sigv4.h"
#include "base/strings.h"
#include "vault/credential.h"
#include "vault/crypto.h"

namespace cloister::aws {
namespace {

std::string* FindHeader(proxy::RequestHead& h, std::string_view name) {
  for (auto& [n, v] : h.headers) {
    if (ToLower(n) == name) return &v;
  }
  return nullptr;
}

// The token in Basic (the password) or Bearer; "" for anything else.
// SECURITY: parses the guest's header (bounded by the caller).
std::string TokenIn(std::string_view authorization, std::string* basic_user) {
  std::string v = Trim(authorization);
  size_t sp = v.find(' ');
  if (sp == std::string::npos) return "";
  std::string scheme = ToLower(v.substr(0, sp));
  std::string rest = Trim(v.substr(sp + 1));
  if (scheme == "bearer") return rest;
  if (scheme != "basic") return "";
  auto decoded = vault::Base64Decode(rest);
  if (!decoded.ok()) return "";
  size_t colon = decoded->find(':');
  if (colon == std::string::npos) return "";
  if (basic_user) *basic_user = decoded->substr(0, colon);
  return decoded->substr(colon + 1);
}

// Puts the real token back for a minted token's placeholder in Authorization (Basic password or
// Bearer). Returns whether it did (and reports the swap in `swapped`); an error refuses it.
// SECURITY: parses the guest's header; the real token goes only into the upstream-bound head.
Result<bool> SwapToken(proxy::RequestHead& head, CredentialCustody& custody,
                       std::vector<proxy::SwappedValue>& swapped) {
  std::string* authz = FindHeader(head, "authorization");
  if (!authz || authz->size() > kMaxHeaderValue) return false;
  std::string user = "\x01";
  std::string token = TokenIn(*authz, &user);
  if (token.empty()) return false;
  auto real = custody.RealToken(token, head.host);
  if (!real.ok()) {
    if (real.error().code() == ErrorCode::kNotFound) return false;
    return real.error();
  }
  *authz = user == "\x01" ? "Bearer " + *real : "Basic " + vault::Base64Encode(user + ":" + *real);
  swapped.push_back({kMintedValues, std::move(real).value(), token});
  return true;
}

std::string ActionFromHead(const proxy::RequestHead& head, VendingService service) {
  for (const auto& [n, v] : head.headers) {
    if (ToLower(n) == "x-amz-target") {
      std::string t = Trim(v);
      return t.substr(t.rfind('.') == std::string::npos ? 0 : t.rfind('.') + 1);
    }
  }
  std::string path = head.target.substr(0, head.target.find('?'));
  if (service == VendingService::kSso && StartsWith(path, "/federation/credentials")) {
    return "GetRoleCredentials";
  }
  if (service == VendingService::kCodeArtifact && StartsWith(path, "/v1/authorization-token")) {
    return "GetAuthorizationToken";
  }
  if (service == VendingService::kSts || service == VendingService::kIam) {
    size_t q = head.target.find('?');
    if (q != std::string::npos) {
      auto a = QueryAction(std::string_view(head.target).substr(q + 1));
      if (a.ok()) return *a;
      return "(malformed)";
    }
  }
  return "";
}

}  // namespace

bool CarriesMintedToken(std::string_view authorization, CredentialCustody& custody) {
  if (authorization.size() > kMaxHeaderValue) return false;
  std::string token = TokenIn(authorization, nullptr);
  return !token.empty() && custody.IsPlaceholderToken(token);
}

namespace {

// For a SigV4-signed request: `service` gets its scope's service, and when it is signed with a
// minted credential's placeholder key id, the re-signer holding that credential's minted secrets
// (null otherwise: not SigV4, unparseable, or another key, which the other filters judge).
// `swapped` (may be null) gets the minted values the re-signed request carries: the real key id
// and session token in place of their placeholders.
Result<std::unique_ptr<Resigner>> MintedResigner(const RequestHead& a, CredentialCustody& custody,
                                                 std::string* service,
                                                 std::vector<proxy::SwappedValue>* swapped) {
  if (!LooksSigV4Signed(a)) return std::unique_ptr<Resigner>();
  auto auth = ParseSigV4(a);
  if (!auth.ok()) return std::unique_ptr<Resigner>();
  *service = auth->service;
  if (!custody.IsPlaceholderKeyId(auth->access_key_id)) return std::unique_ptr<Resigner>();
  ASSIGN_OR_RETURN(AwsSecrets secrets, custody.SecretsFor(auth->access_key_id));
  if (swapped) {
    if (!secrets.placeholder_access_key_id.empty()) {
      swapped->push_back({kMintedValues, secrets.access_key_id, secrets.placeholder_access_key_id});
    }
    if (!secrets.session_token.empty()) {
      swapped->push_back({kMintedValues, secrets.session_token, secrets.placeholder_token});
    }
  }
  return std::make_unique<Resigner>(std::move(secrets));
}

}  // namespace

CustodyFilter::CustodyFilter(std::shared_ptr<CredentialCustody> custody, std::vector<std::string> scope)
    : custody_(std::move(custody)), scope_(std::move(scope)) {}

Result<proxy::ExtensionVerdict> CustodyFilter::OnRequestHead(proxy::RequestHead& head) {
  proxy::ExtensionVerdict verdict;
  ASSIGN_OR_RETURN(bool swapped, SwapToken(head, *custody_, verdict.swapped));
  verdict.handled = swapped;
  if (!vault::HostInAnyScope(head.host, scope_)) return verdict;

  RequestHead a = ToAws(head);
  std::string sigv4_service;
  ASSIGN_OR_RETURN(std::unique_ptr<Resigner> minted,
                   MintedResigner(a, *custody_, &sigv4_service, &verdict.swapped));
  if (minted) {
    // SECURITY: signed with a minted placeholder: verified against the placeholder secret and
    // token, re-signed with the minted ones; anything else is refused here.
    ASSIGN_OR_RETURN(Resigner::Verdict v, minted->Resign(a));
    FromAws(a, head);
    verdict.handled = true;
    if (v.need_full_body) {
      verdict.need_full_body = true;
      verdict.max_body = kMaxFullBody;
    }
    if (v.chunks) verdict.body = ChunkBodyTransform(std::move(v.chunks));
  }

  VendingCall call;
  call.service = ServiceOf(head.host, sigv4_service);
  if (call.service == VendingService::kNone) return verdict;
  call.host = head.host;
  call.action = ActionFromHead(head, call.service);
  if (call.action == "(malformed)") {
    return Error(ErrorCode::kPermissionDenied,
                 "AWS credential custody: refused a request whose Action parameter is malformed");
  }
  RETURN_IF_ERROR(CheckAction(call));
  if ((call.service == VendingService::kSts || call.service == VendingService::kIam) &&
      head.method == "POST") {
    // The Action may be in the form body (also when the query names one): read it before
    // anything goes upstream.
    verdict.need_full_body = true;
    verdict.max_body = std::max(verdict.max_body, kMaxFullBody);
  }
  verdict.handled = true;
  std::string path = head.target.substr(0, std::min(head.target.find('?'), size_t{512}));
  verdict.response = std::make_unique<CustodyResponse>(custody_, std::move(call), head.method, path);
  return verdict;
}

Status CustodyFilter::OnFullBody(proxy::RequestHead& head, std::string_view body) {
  RequestHead a = ToAws(head);
  std::string sigv4_service;
  ASSIGN_OR_RETURN(std::unique_ptr<Resigner> minted,
                   MintedResigner(a, *custody_, &sigv4_service, nullptr));
  if (minted) {
    RETURN_IF_ERROR(minted->ResignWithBody(a, body));
    FromAws(a, head);
  }
  if (!vault::HostInAnyScope(head.host, scope_)) return OkStatus();
  VendingCall call;
  call.service = ServiceOf(head.host, sigv4_service);
  if (call.service != VendingService::kSts && call.service != VendingService::kIam) return OkStatus();
  call.host = head.host;
  call.action = ActionFromHead(head, call.service);
  // SECURITY: a Query-protocol POST names its Action in the form body; a malformed one, or one
  // that differs from the query's, is refused (AWS might read it differently).
  ASSIGN_OR_RETURN(std::string in_body, QueryAction(body));
  if (!in_body.empty() && !call.action.empty() && in_body != call.action) {
    return Error(ErrorCode::kPermissionDenied,
                 "AWS credential custody: refused a request whose query and body name different "
                 "Actions");
  }
  if (!in_body.empty()) call.action = in_body;
  return CheckAction(call);
}

CustodyResponse::CustodyResponse(std::shared_ptr<CredentialCustody> custody, VendingCall call,
                                 std::string method, std::string path)
    : custody_(std::move(custody)), call_(std::move(call)), method_(std::move(method)),
      path_(std::move(path)) {}

Result<proxy::ResponseHold> CustodyResponse::OnHead(proxy::ResponseHead& head) {
  proxy::ResponseHold hold;
  // Only a success mints; error documents pass (AWS error bodies carry no credential).
  if (head.status < 200 || head.status > 299) return hold;
  hold.hold = true;
  hold.max_body = kMaxVendingBody;
  return hold;
}

Result<std::string> CustodyResponse::OnBody(proxy::ResponseHead& head, std::string body) {
  // Called for every transform once any of them held: a non-2xx body was not held for us.
  if (head.status < 200 || head.status > 299) return body;
  CustodyOutcome outcome;
  ASSIGN_OR_RETURN(std::string out, TakeIntoCustody(call_, body, *custody_, &outcome));
  if (!outcome.minted.empty()) {
    proxy::TraceRecord rec;
    rec.time_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                      std::chrono::system_clock::now().time_since_epoch())
                      .count();
    rec.host = call_.host;
    rec.port = 443;
    rec.method = method_;
    rec.path = path_;
    rec.status = head.status;
    for (const std::string& m : outcome.minted) rec.swaps.push_back("aws-custody:" + m);
    custody_->Trace(rec);
  }
  return out;
}

}  // namespace cloister::aws
