// Credential-vending AWS calls: which requests mint credentials, and the bounded parsers that take
// their responses into custody (custody.h).
//
// Services and actions (ServiceOf: by the host's service label, or the SigV4 scope's service):
//   STS (XML, Query protocol; JSON accepted): GetSessionToken, GetFederationToken, AssumeRole,
//     AssumeRoleWithWebIdentity, AssumeRoleWithSAML, AssumeRoot -> custody of <Credentials>.
//     GetCallerIdentity, GetAccessKeyInfo, DecodeAuthorizationMessage pass. Any other action is
//     refused (a new vending action must not slip through).
//   IAM (XML): CreateAccessKey -> custody of <AccessKey> (no expiry: dies with the proxy).
//     CreateLoginProfile, UpdateLoginProfile (the guest would know the console password),
//     CreateServiceSpecificCredential, ResetServiceSpecificCredential, CreateVirtualMFADevice are
//     refused before they reach AWS. Other actions pass if their response has no secret element.
//   SSO portal GetRoleCredentials (GET /federation/credentials, JSON) -> roleCredentials.
//   Cognito Identity GetCredentialsForIdentity (JSON) -> Credentials; GetOpenIdToken* refused.
//   ECR / ECR Public GetAuthorizationToken (JSON, base64 "AWS:password") -> the password.
//   CodeArtifact GetAuthorizationToken (POST /v1/authorization-token, JSON) -> the token.
// Other responses of these services pass only when they carry no credential-like field; a
// response that cannot be parsed, or that carries a credential in a shape not listed here, is
// refused (the caller answers 502 and the trace carries the reason).
//
// SECURITY: parses AWS responses (trusted origin, but through a proxy that guest bytes also reach)
// and guest request bodies with hard bounds: kMaxVendingBody bytes, XML depth 32 and 20000
// elements, no DTD, no CDATA, no entity inside a credential value; JSON nesting 64. Every failure
// is an error, never a crash. Fuzzed by fuzz/aws_vending_fuzz.cc.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "aws/custody.h"
#include "base/result.h"

namespace cloister::aws {

inline constexpr size_t kMaxVendingBody = 1 << 20;

enum class VendingService { kNone, kSts, kIam, kSso, kEcr, kEcrPublic, kCodeArtifact, kCognito };
const char* VendingServiceName(VendingService s);

// `host`: lower-case request host; `sigv4_service`: the signature scope's service ("" unsigned).
VendingService ServiceOf(std::string_view host, std::string_view sigv4_service);

// One request to a vending service, as far as its head tells.
struct VendingCall {
  VendingService service = VendingService::kNone;
  std::string host;
  std::string action;  // "" when only the body tells (Query protocol POST)
};

// Refuses (kPermissionDenied, with the hint) an action that mints what cannot be taken into
// custody, or an unknown STS action. `action` "" passes (decided later).
Status CheckAction(const VendingCall& call);
// The Action= of a Query-protocol form body (application/x-www-form-urlencoded) or query string;
// "" when absent. kCorrupt when it is malformed.
Result<std::string> QueryAction(std::string_view form);

// What one response minted, for the trace (placeholders and kinds only).
struct CustodyOutcome {
  std::string action;                 // as the response named it
  std::vector<std::string> minted;    // "sts:AssumeRole ASIA...(placeholder) until 2026-...Z"
};

// Takes every credential in a 2xx response `body` of `call` into `custody` and returns the body
// the guest gets (the same document with placeholders in place of each minted value), or an error
// when the response cannot be handed over safely.
Result<std::string> TakeIntoCustody(const VendingCall& call, std::string_view body,
                                    CredentialCustody& custody, CustodyOutcome* outcome);

}  // namespace cloister::aws
