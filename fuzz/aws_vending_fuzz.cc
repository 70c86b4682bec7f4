// Fuzzes the credential-custody parsers (aws/vending.h) with hostile response bodies and form
// bodies: the bounded XML reader (STS, IAM), the JSON paths (SSO, Cognito, ECR, CodeArtifact),
// Action= extraction, and the custody that takes what they find. Input: one selector byte (which
// service and action the response answers), then the body.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "aws/custody.h"
#include "aws/vending.h"

using namespace cloister::aws;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  struct Case {
    VendingService service;
    const char* host;
    const char* action;
  };
  static const Case kCases[] = {
      {VendingService::kSts, "sts.amazonaws.com", ""},
      {VendingService::kSts, "sts.amazonaws.com", "AssumeRole"},
      {VendingService::kIam, "iam.amazonaws.com", ""},
      {VendingService::kSso, "portal.sso.eu-west-1.amazonaws.com", "GetRoleCredentials"},
      {VendingService::kCognito, "cognito-identity.eu-west-1.amazonaws.com", "GetCredentialsForIdentity"},
      {VendingService::kEcr, "api.ecr.eu-west-1.amazonaws.com", "GetAuthorizationToken"},
      {VendingService::kEcrPublic, "api.ecr-public.us-east-1.amazonaws.com", "GetAuthorizationToken"},
      {VendingService::kCodeArtifact, "codeartifact.eu-west-1.amazonaws.com", "GetAuthorizationToken"},
      {VendingService::kEcr, "api.ecr.eu-west-1.amazonaws.com", "DescribeRepositories"},
  };
  const Case& c = kCases[data[0] % (sizeof(kCases) / sizeof(kCases[0]))];
  std::string_view body(reinterpret_cast<const char*>(data) + 1, size - 1);
  static auto custody = CredentialCustody::Create(nullptr, [] { return int64_t{1700000000}; });
  if (!custody.ok()) return 0;
  VendingCall call{c.service, c.host, c.action};
  CustodyOutcome outcome;
  auto out = TakeIntoCustody(call, body, **custody, &outcome);
  if (out.ok() && out->size() > kMaxVendingBody * 4) __builtin_trap();
  (void)QueryAction(body);
  (void)ServiceOf(std::string(body.substr(0, 253)), "");
  return 0;
}
