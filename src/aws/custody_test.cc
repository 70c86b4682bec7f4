// AWS credential custody driven as the proxy drives it: CustodyFilter::OnRequestHead/OnFullBody
// and the CustodyResponse it returns (OnHead/OnBody), over real-looking vending responses. The
// end-to-end proof with awscli through the real proxy is proxy_awscli_test.cc.
#include "aws/custody.h"

#include <gtest/gtest.h>

#include "aws/custody_filter.h"
#include "aws/proxy_filter.h"
#include "aws/sigv4.h"
#include "aws/vending.h"
#include "base/strings.h"
#include "proxy/redactor.h"
#include "vault/credential.h"
#include "vault/crypto.h"

namespace cloister::aws {
namespace {

// What AWS "mints" in these tests (shaped like the real thing).
constexpr char kMintedId[] = "ASIAZ7EXAMPLEMINTED1";
constexpr char kMintedSecret[] = "Mint3dS3cretKey/With+Slashes0123456789ab";
const std::string kMintedToken =
    "IQoJb3JpZ2luX2VjEMINTEDtokenAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA0123456789+/"
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789abcdefghijklmnopqrstuvwx==";
constexpr int64_t kNow = 1796126400;  // 2026-12-01T12:00:00Z
constexpr char kExpiry[] = "2026-12-01T13:00:00Z";
const std::vector<std::string> kScope = {"amazonaws.com"};

std::string StsResponse(const std::string& action = "GetSessionToken",
                        const std::string& id = kMintedId) {
  return "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<" + action +
         "Response xmlns=\"https://sts.amazonaws.com/doc/2011-06-15/\">\n  <" + action +
         "Result>\n    <Credentials>\n      <AccessKeyId>" + id +
         "</AccessKeyId>\n      <SecretAccessKey>" + kMintedSecret +
         "</SecretAccessKey>\n      <SessionToken>" + kMintedToken +
         "</SessionToken>\n      <Expiration>" + kExpiry +
         "</Expiration>\n    </Credentials>\n  </" + action +
         "Result>\n  <ResponseMetadata><RequestId>58c5dbae</RequestId></ResponseMetadata>\n</" +
         action + "Response>\n";
}

// The guest's SigV4 signature over `head` (header form, empty payload) with key/secret/token.
void SignAsGuest(proxy::RequestHead& head, const std::string& key_id, const std::string& secret,
                 const std::string& token, const std::string& service = "sts") {
  head.headers.push_back({"X-Amz-Date", "20261201T120000Z"});
  if (!token.empty()) head.headers.push_back({"X-Amz-Security-Token", token});
  SigV4Auth auth;
  auth.access_key_id = key_id;
  auth.date = "20261201";
  auth.region = "us-east-1";
  auth.service = service;
  auth.amz_date = "20261201T120000Z";
  auth.signed_headers = {"host", "x-amz-date"};
  if (!token.empty()) auth.signed_headers.push_back("x-amz-security-token");
  auth.security_token = token;
  RequestHead a{head.method, head.target, {}};
  for (auto& [n, v] : head.headers) a.headers.push_back({n, v});
  auto cr = CanonicalRequest(a, auth, CanonicalOptions{UriMode::kDoubleEncode, QueryMode::kReencode,
                                                       std::string(kEmptySha256)});
  ASSERT_TRUE(cr.ok()) << cr.error().message();
  std::string sig = SignatureHex(SigningKey(secret, auth.date, auth.region, auth.service),
                                 StringToSign(auth, *cr));
  head.headers.push_back({"Authorization", "AWS4-HMAC-SHA256 Credential=" + key_id + "/" +
                                               auth.Scope() + ", SignedHeaders=" +
                                               auth.SignedHeadersString() + ", Signature=" + sig});
}

// What an upstream checks: the head's signature verifies with `secret` (for its own key id).
bool VerifiesWith(const proxy::RequestHead& head, const std::string& secret) {
  RequestHead a{head.method, head.target, {}};
  for (auto& [n, v] : head.headers) a.headers.push_back({n, v});
  auto auth = ParseSigV4(a);
  if (!auth.ok()) return false;
  auto cr = CanonicalRequest(a, *auth, CanonicalOptions{UriMode::kDoubleEncode, QueryMode::kReencode,
                                                        std::string(kEmptySha256)});
  if (!cr.ok()) return false;
  return SignatureHex(SigningKey(secret, auth->date, auth->region, auth->service),
                      StringToSign(*auth, *cr)) == auth->signature;
}

std::string HeaderOf(const proxy::RequestHead& h, const std::string& name) {
  for (auto& [n, v] : h.headers) {
    if (ToLower(n) == name) return v;
  }
  return "";
}

class CustodyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto c = CredentialCustody::Create([this](const proxy::TraceRecord& r) { traced_.push_back(r); },
                                       [this] { return now_; });
    ASSERT_TRUE(c.ok());
    custody_ = *c;
    filter_ = std::make_unique<CustodyFilter>(custody_, kScope);
  }

  // Drives one request and its 200 response through the filter; returns the guest's body.
  Result<std::string> Exchange(proxy::RequestHead head, const std::string& response,
                               const std::string& form_body = "",
                               std::vector<std::pair<std::string, std::string>> rh = {}) {
    ASSIGN_OR_RETURN(proxy::ExtensionVerdict v, filter_->OnRequestHead(head));
    if (v.need_full_body) RETURN_IF_ERROR(filter_->OnFullBody(head, form_body));
    forwarded_ = head;
    if (!v.response) return Error(ErrorCode::kNotFound, "no response transform");
    proxy::ResponseHead r{200, rh};
    ASSIGN_OR_RETURN(proxy::ResponseHold hold, v.response->OnHead(r));
    if (!hold.hold) return Error(ErrorCode::kInternal, "not held");
    if (response.size() > hold.max_body) return Error(ErrorCode::kInvalidArgument, "502: too big");
    return v.response->OnBody(r, response);
  }

  static proxy::RequestHead Head(const std::string& host, const std::string& method = "POST",
                                 const std::string& target = "/") {
    return proxy::RequestHead{method, target, host, 443, {{"Host", host}}};
  }

  // Pulls a leaf element's text out of an XML body (test helper only).
  static std::string Xml(const std::string& body, const std::string& name) {
    size_t a = body.find("<" + name + ">");
    size_t b = body.find("</" + name + ">");
    if (a == std::string::npos || b == std::string::npos) return "";
    return body.substr(a + name.size() + 2, b - a - name.size() - 2);
  }

  static void ExpectNoMintedByte(const std::string& body) {
    EXPECT_EQ(body.find(kMintedSecret), std::string::npos);
    EXPECT_EQ(body.find(kMintedToken), std::string::npos);
    EXPECT_EQ(body.find(kMintedId), std::string::npos);
    // Not even a piece of the secret (any 8 consecutive characters).
    for (size_t i = 0; i + 8 <= std::string(kMintedSecret).size(); ++i) {
      EXPECT_EQ(body.find(std::string(kMintedSecret).substr(i, 8)), std::string::npos) << i;
    }
  }

  int64_t now_ = kNow;
  std::vector<proxy::TraceRecord> traced_;
  std::shared_ptr<CredentialCustody> custody_;
  std::unique_ptr<CustodyFilter> filter_;
  proxy::RequestHead forwarded_;
};

TEST_F(CustodyTest, StsSessionTokenIsTakenIntoCustodyAndTheGuestGetsPlaceholders) {
  auto body = Exchange(Head("sts.amazonaws.com"), StsResponse(),
                       "Action=GetSessionToken&Version=2011-06-15");
  ASSERT_TRUE(body.ok()) << body.error().message();
  ExpectNoMintedByte(*body);
  std::string id = Xml(*body, "AccessKeyId"), secret = Xml(*body, "SecretAccessKey"),
              token = Xml(*body, "SessionToken");
  // Structure-preserving placeholders.
  EXPECT_EQ(id.size(), 20u);
  EXPECT_EQ(id.substr(0, 4), "ASIA");
  EXPECT_EQ(secret.size(), 40u);
  EXPECT_EQ(secret.substr(0, 8), "CLOISTER");
  EXPECT_EQ(token.size(), kMintedToken.size());
  EXPECT_EQ(Xml(*body, "Expiration"), kExpiry);  // everything else as AWS sent it
  EXPECT_NE(body->find("<RequestId>58c5dbae</RequestId>"), std::string::npos);
  // In custody: the placeholder key id maps to the real values.
  auto s = custody_->SecretsFor(id);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->access_key_id, kMintedId);
  EXPECT_EQ(s->secret, kMintedSecret);
  EXPECT_EQ(s->session_token, kMintedToken);
  // Traced: the placeholder id and kind, never a real value.
  ASSERT_EQ(traced_.size(), 1u);
  ASSERT_EQ(traced_[0].swaps.size(), 1u);
  EXPECT_NE(traced_[0].swaps[0].find("sts:GetSessionToken " + id), std::string::npos) << traced_[0].swaps[0];
  EXPECT_EQ(traced_[0].swaps[0].find(kMintedId), std::string::npos);
  EXPECT_EQ(traced_[0].host, "sts.amazonaws.com");
}

TEST_F(CustodyTest, EveryStsVendingActionIsTakenIntoCustody) {
  for (const char* action : {"GetFederationToken", "AssumeRole", "AssumeRoleWithWebIdentity",
                             "AssumeRoleWithSAML", "AssumeRoot"}) {
    auto body = Exchange(Head("sts.us-east-1.amazonaws.com", "GET",
                              std::string("/?Action=") + action + "&Version=2011-06-15"),
                         StsResponse(action));
    ASSERT_TRUE(body.ok()) << action << ": " << body.error().message();
    ExpectNoMintedByte(*body);
  }
}

TEST_F(CustodyTest, AFollowUpSignedWithThePlaceholdersIsResignedWithTheMintedSecret) {
  auto body = Exchange(Head("sts.amazonaws.com"), StsResponse(), "Action=AssumeRole");
  ASSERT_TRUE(body.ok()) << body.error().message();
  std::string id = Xml(*body, "AccessKeyId"), secret = Xml(*body, "SecretAccessKey"),
              token = Xml(*body, "SessionToken");

  proxy::RequestHead h = Head("s3.us-east-1.amazonaws.com", "GET", "/bucket/key");
  SignAsGuest(h, id, secret, token, "s3");
  ASSERT_TRUE(VerifiesWith(h, secret));
  auto v = filter_->OnRequestHead(h);
  ASSERT_TRUE(v.ok()) << v.error().message();
  EXPECT_TRUE(v->handled);
  // Upstream sees the minted key id, the minted token, and a signature by the minted secret.
  EXPECT_NE(HeaderOf(h, "authorization").find(std::string("Credential=") + kMintedId), std::string::npos);
  EXPECT_EQ(HeaderOf(h, "x-amz-security-token"), kMintedToken);
  EXPECT_TRUE(VerifiesWith(h, kMintedSecret));
  EXPECT_FALSE(VerifiesWith(h, secret));

  // Signed with the placeholder key id but another secret: refused, nothing re-signed.
  proxy::RequestHead bad = Head("s3.us-east-1.amazonaws.com", "GET", "/bucket/key");
  SignAsGuest(bad, id, "SomeOtherSecretThatIsNotThePlaceholder00", token, "s3");
  auto refused = filter_->OnRequestHead(bad);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().code(), ErrorCode::kPermissionDenied);
  EXPECT_EQ(HeaderOf(bad, "x-amz-security-token"), token);

  // The workspace's own re-signer leaves such a request to custody instead of refusing it.
  AwsProxyFilter ws(AwsSecrets{"AKIAWORKSPACEKEY0001", "RealWorkspaceSecret", "", "PhWorkspaceSecret", ""},
                    kScope, custody_);
  proxy::RequestHead h2 = Head("s3.us-east-1.amazonaws.com", "GET", "/bucket/key");
  SignAsGuest(h2, id, secret, token, "s3");
  auto wv = ws.OnRequestHead(h2);
  ASSERT_TRUE(wv.ok()) << wv.error().message();
  EXPECT_FALSE(wv->handled);
}

TEST_F(CustodyTest, ExpiredMintedCredentialsAreRefusedWithTheExpiry) {
  auto body = Exchange(Head("sts.amazonaws.com"), StsResponse(), "Action=GetSessionToken");
  ASSERT_TRUE(body.ok());
  std::string id = Xml(*body, "AccessKeyId"), secret = Xml(*body, "SecretAccessKey"),
              token = Xml(*body, "SessionToken");
  now_ = kNow + 3600;  // the expiry
  proxy::RequestHead h = Head("s3.us-east-1.amazonaws.com", "GET", "/b/k");
  SignAsGuest(h, id, secret, token, "s3");
  auto v = filter_->OnRequestHead(h);
  // Nothing in custody any more: the workspace filter would refuse the foreign key, and custody
  // does not re-sign it: the request never goes out signed with the minted secret.
  if (v.ok()) EXPECT_FALSE(VerifiesWith(h, kMintedSecret));
  EXPECT_EQ(custody_->size(), 0u);
  // Asked directly just before the purge, the error names the expiry.
  now_ = kNow;
  auto again = Exchange(Head("sts.amazonaws.com"), StsResponse("GetSessionToken", "ASIAZ7EXAMPLEMINTED2"),
                        "Action=GetSessionToken");
  ASSERT_TRUE(again.ok());
  now_ = kNow + 7200;
  auto s = custody_->SecretsFor(Xml(*again, "AccessKeyId"));
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().code(), ErrorCode::kPermissionDenied);
  EXPECT_NE(s.error().message().find("expired at 2026-12-01T13:00:00Z"), std::string::npos)
      << s.error().message();
  // An already expired credential is not taken (nor handed over).
  auto late = Exchange(Head("sts.amazonaws.com"), StsResponse("GetSessionToken", "ASIAZ7EXAMPLEMINTED3"),
                       "Action=GetSessionToken");
  EXPECT_FALSE(late.ok());
}

TEST_F(CustodyTest, WhatCannotBeTakenIntoCustodyIsRefused) {
  // Unknown STS action: refused before it reaches AWS (query and form body) and in a response.
  proxy::RequestHead q = Head("sts.amazonaws.com", "GET", "/?Action=GetDelegatedAccessToken");
  EXPECT_FALSE(filter_->OnRequestHead(q).ok());
  EXPECT_FALSE(Exchange(Head("sts.amazonaws.com"), StsResponse(), "Action=MintSomethingNew").ok());
  EXPECT_FALSE(Exchange(Head("sts.amazonaws.com"), StsResponse("MintSomethingNew"),
                        "Action=GetSessionToken&Action=MintSomethingNew").ok());
  auto unknown = Exchange(Head("sts.amazonaws.com", "GET", "/"), StsResponse("MintSomethingNew"));
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.error().message().find("does not know"), std::string::npos);
  // The body's Action counts even when the query names an allowed one.
  auto smuggled = Exchange(Head("iam.amazonaws.com", "POST", "/?Action=ListUsers"), "<x/>",
                           "Action=CreateLoginProfile&UserName=bob&Password=hunter2");
  ASSERT_FALSE(smuggled.ok());
  EXPECT_EQ(smuggled.error().code(), ErrorCode::kPermissionDenied);
  // IAM actions whose secret the guest would know or that cannot be replaced.
  for (const char* a : {"CreateLoginProfile", "UpdateLoginProfile", "CreateServiceSpecificCredential",
                        "ResetServiceSpecificCredential", "CreateVirtualMFADevice"}) {
    auto r = Exchange(Head("iam.amazonaws.com"), "<x/>",
                      std::string("Action=") + a + "&UserName=bob&Password=hunter2");
    ASSERT_FALSE(r.ok()) << a;
    EXPECT_EQ(r.error().code(), ErrorCode::kPermissionDenied) << a;
  }
  // Malformed, truncated or oversized vending responses.
  std::string good = StsResponse();
  for (const std::string& bad : std::vector<std::string>{
        good.substr(0, good.size() / 2), std::string("<!DOCTYPE x [<!ENTITY e \"x\">]>") + good,
        std::string("not xml at all"),
        // credentials without a session token / expiration
        "<GetSessionTokenResponse><GetSessionTokenResult><Credentials><AccessKeyId>ASIAZ7EXAMPLEMINTED1"
        "</AccessKeyId><SecretAccessKey>" + std::string(kMintedSecret) +
            "</SecretAccessKey></Credentials></GetSessionTokenResult></GetSessionTokenResponse>",
        // an entity inside the secret
        std::string(good).replace(good.find(kMintedSecret), 4, "&amp;"),
        // a token of a shape that cannot be replaced
        std::string(good).replace(good.find(kMintedToken), 10, "not base64"),
        // a secret outside the Credentials block
        std::string(good).replace(good.find("<ResponseMetadata>"), 0,
                                  "<SecretAccessKey>" + std::string(kMintedSecret) + "</SecretAccessKey>"),
        // a minted value echoed in an element that is not a credential field
        std::string(good).replace(good.find("<ResponseMetadata>"), 0, "<Echo>" + kMintedToken + "</Echo>"),
        // nested too deep
        "<GetSessionTokenResponse>" + std::string(40, '<') + "</GetSessionTokenResponse>",
        std::string(kMaxVendingBody + 1, ' ')}) {
    auto r = Exchange(Head("sts.amazonaws.com", "GET", "/?Action=GetSessionToken"), bad);
    EXPECT_FALSE(r.ok()) << bad.substr(0, 120);
    if (r.ok()) ExpectNoMintedByte(*r);
  }
  EXPECT_EQ(custody_->size(), 0u);
}

TEST_F(CustodyTest, PassingActionsPassUnlessTheyCarryASecret) {
  std::string identity =
      "<GetCallerIdentityResponse><GetCallerIdentityResult><Account>123456789012</Account>"
      "</GetCallerIdentityResult></GetCallerIdentityResponse>";
  auto r = Exchange(Head("sts.amazonaws.com"), identity, "Action=GetCallerIdentity");
  ASSERT_TRUE(r.ok()) << r.error().message();
  EXPECT_EQ(*r, identity);
  std::string users = "<ListUsersResponse><ListUsersResult><Users/></ListUsersResult></ListUsersResponse>";
  r = Exchange(Head("iam.amazonaws.com"), users, "Action=ListUsers");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, users);
  // A passing action's response with a secret element: refused.
  EXPECT_FALSE(Exchange(Head("iam.amazonaws.com"),
                        "<ListUsersResponse><SecretAccessKey>x</SecretAccessKey></ListUsersResponse>",
                        "Action=ListUsers").ok());
  // Error responses pass.
  std::string err = "<ErrorResponse><Error><Code>AccessDenied</Code></Error></ErrorResponse>";
  r = Exchange(Head("sts.amazonaws.com"), err, "Action=AssumeRole");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, err);
  // Hosts outside the vending services get no response transform.
  proxy::RequestHead s3 = Head("s3.amazonaws.com", "GET", "/b/k");
  auto v = filter_->OnRequestHead(s3);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->response, nullptr);
}

TEST_F(CustodyTest, IamCreateAccessKeyIsTakenIntoCustody) {
  std::string real_id = "AKIAZ7EXAMPLELONGKEY";
  std::string resp =
      "<CreateAccessKeyResponse><CreateAccessKeyResult><AccessKey><UserName>bob</UserName>"
      "<AccessKeyId>" + real_id + "</AccessKeyId><Status>Active</Status><SecretAccessKey>" +
      kMintedSecret + "</SecretAccessKey></AccessKey></CreateAccessKeyResult></CreateAccessKeyResponse>";
  auto r = Exchange(Head("iam.amazonaws.com"), resp, "Action=CreateAccessKey&UserName=bob");
  ASSERT_TRUE(r.ok()) << r.error().message();
  ExpectNoMintedByte(*r);
  EXPECT_EQ(r->find(real_id), std::string::npos);
  std::string id = Xml(*r, "AccessKeyId");
  EXPECT_EQ(id.substr(0, 4), "AKIA");
  auto s = custody_->SecretsFor(id);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->access_key_id, real_id);
  EXPECT_TRUE(s->session_token.empty());
  now_ += 400 * 24 * 3600;  // no expiry: lives as long as the proxy
  EXPECT_TRUE(custody_->SecretsFor(id).ok());
}

TEST_F(CustodyTest, JsonServicesSsoCognitoEcrCodeArtifact) {
  // SSO GetRoleCredentials (expiration in milliseconds).
  std::string sso = nlohmann::json{{"roleCredentials",
                                    {{"accessKeyId", kMintedId}, {"secretAccessKey", kMintedSecret},
                                     {"sessionToken", kMintedToken}, {"expiration", (kNow + 3600) * 1000}}}}
                        .dump();
  auto r = Exchange(Head("portal.sso.eu-west-1.amazonaws.com", "GET",
                         "/federation/credentials?role_name=dev&account_id=123456789012"),
                    sso);
  ASSERT_TRUE(r.ok()) << r.error().message();
  ExpectNoMintedByte(*r);
  auto j = nlohmann::json::parse(*r);
  EXPECT_EQ(j["roleCredentials"]["accessKeyId"].get<std::string>().substr(0, 4), "ASIA");
  EXPECT_EQ(j["roleCredentials"]["expiration"], (kNow + 3600) * 1000);
  EXPECT_TRUE(custody_->SecretsFor(j["roleCredentials"]["accessKeyId"].get<std::string>()).ok());

  // Cognito GetCredentialsForIdentity (SecretKey, epoch seconds); GetOpenIdToken refused.
  std::string cognito = nlohmann::json{{"IdentityId", "eu-west-1:1234"},
                                       {"Credentials",
                                        {{"AccessKeyId", "ASIAZ7EXAMPLECOGNITO"}, {"SecretKey", kMintedSecret},
                                         {"SessionToken", kMintedToken}, {"Expiration", kNow + 3600}}}}
                            .dump();
  proxy::RequestHead ch = Head("cognito-identity.eu-west-1.amazonaws.com");
  ch.headers.push_back({"X-Amz-Target", "AWSCognitoIdentityService.GetCredentialsForIdentity"});
  r = Exchange(ch, cognito);
  ASSERT_TRUE(r.ok()) << r.error().message();
  ExpectNoMintedByte(*r);
  proxy::RequestHead oidc = Head("cognito-identity.eu-west-1.amazonaws.com");
  oidc.headers.push_back({"X-Amz-Target", "AWSCognitoIdentityService.GetOpenIdToken"});
  EXPECT_FALSE(filter_->OnRequestHead(oidc).ok());

  // ECR GetAuthorizationToken: base64 "AWS:password"; the registry gets the real one back.
  std::string password = "eyJwYXlsb2FkIjoiUkVBTE1JTlRFREVDUlBBU1NXT1JE" + std::string(200, 'Q');
  std::string ecr = nlohmann::json{{"authorizationData",
                                    {{{"authorizationToken", vault::Base64Encode("AWS:" + password)},
                                      {"expiresAt", kNow + 43200},
                                      {"proxyEndpoint", "https://123456789012.dkr.ecr.eu-west-1.amazonaws.com"}}}}}
                        .dump();
  proxy::RequestHead eh = Head("api.ecr.eu-west-1.amazonaws.com");
  eh.headers.push_back({"X-Amz-Target", "AmazonEC2ContainerRegistry_V20150921.GetAuthorizationToken"});
  r = Exchange(eh, ecr);
  ASSERT_TRUE(r.ok()) << r.error().message();
  EXPECT_EQ(r->find(password.substr(0, 40)), std::string::npos);
  EXPECT_EQ(r->find(vault::Base64Encode("AWS:" + password).substr(8, 40)), std::string::npos);
  auto ej = nlohmann::json::parse(*r);
  auto guest = vault::Base64Decode(ej["authorizationData"][0]["authorizationToken"].get<std::string>());
  ASSERT_TRUE(guest.ok());
  ASSERT_EQ(guest->substr(0, 4), "AWS:");
  EXPECT_EQ(guest->size(), 4 + password.size());
  // docker login / pull with the guest's copy: the registry gets the real password.
  proxy::RequestHead reg = Head("123456789012.dkr.ecr.eu-west-1.amazonaws.com", "GET", "/v2/");
  reg.headers.push_back({"Authorization", "Basic " + vault::Base64Encode(*guest)});
  auto rv = filter_->OnRequestHead(reg);
  ASSERT_TRUE(rv.ok()) << rv.error().message();
  EXPECT_TRUE(rv->handled);
  EXPECT_EQ(HeaderOf(reg, "authorization"), "Basic " + vault::Base64Encode("AWS:" + password));
  // SECURITY (issue 37 item 3): the value put back is reported, so the proxy redacts it from the
  // registry's answer (an echo of the header gives the guest its placeholder back).
  ASSERT_EQ(rv->swapped.size(), 1u);
  EXPECT_EQ(rv->swapped[0].credential, kMintedValues);
  EXPECT_EQ(rv->swapped[0].real, password);
  EXPECT_EQ(rv->swapped[0].placeholder, guest->substr(4));
  {
    proxy::Redactor red;
    red.Add(rv->swapped[0].real, rv->swapped[0].placeholder);
    std::string echo = red.Apply("you sent: " + HeaderOf(reg, "authorization"));
    EXPECT_EQ(echo.find(vault::Base64Encode("AWS:" + password).substr(8, 40)), std::string::npos);
  }
  // The workspace's re-signer (which refuses any non-SigV4 Authorization in scope) leaves it to
  // custody.
  AwsProxyFilter ws(AwsSecrets{"AKIAWORKSPACEKEY0001", "RealWorkspaceSecret", "", "PhWorkspaceSecret", ""},
                    kScope, custody_);
  proxy::RequestHead reg2 = Head("123456789012.dkr.ecr.eu-west-1.amazonaws.com", "GET", "/v2/");
  reg2.headers.push_back({"Authorization", "Basic " + vault::Base64Encode(*guest)});
  auto wsv = ws.OnRequestHead(reg2);
  ASSERT_TRUE(wsv.ok()) << wsv.error().message();
  EXPECT_FALSE(wsv->handled);
  // ... and no other host does.
  proxy::RequestHead other = Head("evil.example.test", "GET", "/");
  other.headers.push_back({"Authorization", "Basic " + vault::Base64Encode(*guest)});
  auto ov = filter_->OnRequestHead(other);
  ASSERT_FALSE(ov.ok());
  EXPECT_EQ(HeaderOf(other, "authorization"), "Basic " + vault::Base64Encode(*guest));

  // CodeArtifact: the token, put back as Bearer for the repository endpoints of the region.
  std::string ca_token = "eyJ2ZXIiOjEsImlzdSI6MTcwMDAwMDAwMH0.REALCODEARTIFACTTOKEN" + std::string(300, 'x');
  std::string ca = nlohmann::json{{"authorizationToken", ca_token}, {"expiration", kNow + 3600}}.dump();
  r = Exchange(Head("codeartifact.eu-west-1.amazonaws.com", "POST",
                    "/v1/authorization-token?domain=d&domain-owner=123456789012"),
               ca);
  ASSERT_TRUE(r.ok()) << r.error().message();
  EXPECT_EQ(r->find("REALCODEARTIFACTTOKEN"), std::string::npos);
  std::string guest_ca = nlohmann::json::parse(*r)["authorizationToken"];
  proxy::RequestHead npm = Head("d-123456789012.d.codeartifact.eu-west-1.amazonaws.com", "GET", "/npm/r/x");
  npm.headers.push_back({"Authorization", "Bearer " + guest_ca});
  auto nv = filter_->OnRequestHead(npm);
  ASSERT_TRUE(nv.ok());
  EXPECT_EQ(HeaderOf(npm, "authorization"), "Bearer " + ca_token);
  ASSERT_EQ(nv->swapped.size(), 1u);  // reported for the response redaction
  EXPECT_EQ(nv->swapped[0].real, ca_token);
  EXPECT_EQ(nv->swapped[0].placeholder, guest_ca);

  EXPECT_EQ(traced_.size(), 4u);
  // Malformed JSON vending responses are refused.
  for (const std::string& bad : {std::string("{"), std::string(100, '['), std::string("{\"authorizationData\":[]}"),
                                 std::string("{\"authorizationData\":[{\"authorizationToken\":\"bm90LWF3cw==\"}]}")}) {
    EXPECT_FALSE(Exchange(eh, bad).ok()) << bad.substr(0, 60);
  }
}

TEST_F(CustodyTest, PlaceholdersAreDeterministicPerValueAndCarryNoSecretByte) {
  MintedValues v{"sts:AssumeRole", kMintedId, kMintedSecret, kMintedToken, "", kNow + 60, {}};
  auto a = custody_->Add(v);
  auto b = custody_->Add(v);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->access_key_id, b->access_key_id);
  EXPECT_EQ(a->secret, b->secret);
  EXPECT_EQ(custody_->size(), 1u);
  // Another custody (another proxy): other placeholders for the same value.
  auto other = CredentialCustody::Create(nullptr, [] { return kNow; });
  ASSERT_TRUE(other.ok());
  auto c = (*other)->Add(v);
  ASSERT_TRUE(c.ok());
  EXPECT_NE(c->secret, a->secret);
  EXPECT_NE(c->access_key_id, a->access_key_id);
  // The placeholder secret shares no position with the real one beyond chance, and no '/' or '+'.
  EXPECT_EQ(a->secret.find_first_of("/+"), std::string::npos);
}

TEST_F(CustodyTest, AddAwsFiltersPutsOneCustodyFilterAfterTheResigners) {
  proxy::ProxyConfig cfg;
  auto c = vault::MakeAwsCredential("AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "",
                                    "us-east-1", {});
  ASSERT_TRUE(c.ok());
  vault::BoundCredential b;
  b.credential = *c;
  b.placeholder = "PLACEHOLDERSECRETxxxxxxxxxxxxxxxxxxxxxxx";
  cfg.credentials = {b};
  auto n = AddAwsFilters(cfg);
  ASSERT_TRUE(n.ok()) << n.error().message();
  ASSERT_EQ(cfg.extension_filters.size(), 2u);
  EXPECT_NE(dynamic_cast<AwsProxyFilter*>(cfg.extension_filters[0].get()), nullptr);
  EXPECT_NE(dynamic_cast<CustodyFilter*>(cfg.extension_filters[1].get()), nullptr);
  proxy::ProxyConfig none;
  ASSERT_TRUE(AddAwsFilters(none).ok());
  EXPECT_TRUE(none.extension_filters.empty());
}

TEST(Iso8601Test, ParsesAwsForms) {
  EXPECT_EQ(*ParseIso8601("2026-12-01T12:00:00Z"), kNow);
  EXPECT_EQ(*ParseIso8601("2026-12-01T12:00:00.123Z"), kNow);
  EXPECT_EQ(*ParseIso8601("2026-12-01T13:00:00+01:00"), kNow);
  EXPECT_EQ(FormatIso8601(kNow), "2026-12-01T12:00:00Z");
  for (const char* bad : {"", "2026-12-01", "2026-13-01T12:00:00Z", "2026-12-01T12:00:00", "x026-12-01T12:00:00Z"}) {
    EXPECT_FALSE(ParseIso8601(bad).ok()) << bad;
  }
}

}  // namespace
}  // namespace cloister::aws
