// AwsProxyFilter as the proxy calls it (scope, pass-through, refusal, the three signature forms)
// and AddAwsFilters (the per-boot wiring). The end-to-end proof with awscli through the real proxy
// is proxy_awscli_test.cc.
#include "aws/proxy_filter.h"

#include <gtest/gtest.h>

#include "aws/doc_vectors.h"
#include "vault/credential.h"

namespace cloister::aws {
namespace {

using namespace doc;  // NOLINT: the documentation's vectors

// AWS documentation examples (signed with kDocSecret; the Authorization header in the form the
// re-signer writes it, ", " between fields), so the "guest" signatures are independent
// of our signer: the filter configured with kDocSecret as the placeholder must accept them.
constexpr char kDocGetSig[] = "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41";

proxy::RequestHead DocGet(std::string host = "examplebucket.s3.amazonaws.com") {
  return proxy::RequestHead{
      "GET", "/test.txt", host, 443,
      {{"Host", host},
       {"Range", "bytes=0-9"},
       {"x-amz-content-sha256", std::string(kEmptySha256)},
       {"x-amz-date", "20130524T000000Z"},
       {"Authorization",
        "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, "
        "SignedHeaders=host;range;x-amz-content-sha256;x-amz-date, "
        "Signature=" + std::string(kDocGetSig)}}};
}

proxy::RequestHead DocChunked() {
  return proxy::RequestHead{
      "PUT", "/examplebucket/chunkObject.txt", "s3.amazonaws.com", 443,
      {{"Host", "s3.amazonaws.com"},
       {"x-amz-date", "20130524T000000Z"},
       {"x-amz-storage-class", "REDUCED_REDUNDANCY"},
       {"Authorization",
        "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, "
        "SignedHeaders=content-encoding;content-length;host;x-amz-content-sha256;x-amz-date;"
        "x-amz-decoded-content-length;x-amz-storage-class, "
        "Signature=4f232c4386841ef735655705268965c44a0e4690baa4adea153f7db9fa80a0a9"},
       {"x-amz-content-sha256", "STREAMING-AWS4-HMAC-SHA256-PAYLOAD"},
       {"Content-Encoding", "aws-chunked"},
       {"x-amz-decoded-content-length", "66560"},
       {"Content-Length", "66824"}}};
}

AwsProxyFilter Filter(const char* placeholder, const char* real,
                      std::vector<std::string> scope = {"amazonaws.com"}) {
  return AwsProxyFilter(AwsSecrets{kKeyId, real, "", placeholder, ""}, std::move(scope));
}

const std::string* Find(const proxy::RequestHead& h, std::string_view name) {
  for (const auto& [n, v] : h.headers) {
    if (n.size() == name.size() && std::equal(n.begin(), n.end(), name.begin(),
                                              [](char a, char b) { return std::tolower(a) == b; })) {
      return &v;
    }
  }
  return nullptr;
}

TEST(AwsProxyFilterTest, OutOfScopeAndUnsignedRequestsPassUntouched) {
  AwsProxyFilter f = Filter(kDocSecret, kOtherSecret);
  // Same signed request toward a host outside the scope (not a suffix match either).
  for (std::string host : {"examplebucket.s3.example.com", "notamazonaws.com", "amazonaws.com.evil.test"}) {
    proxy::RequestHead h = DocGet(host);
    proxy::RequestHead before = h;
    auto v = f.OnRequestHead(h);
    ASSERT_TRUE(v.ok()) << host;
    EXPECT_FALSE(v->handled) << host;
    EXPECT_EQ(h.headers, before.headers);
  }
  proxy::RequestHead unsigned_get{"GET", "/public.txt", "bucket.s3.amazonaws.com", 443,
                                  {{"Host", "bucket.s3.amazonaws.com"}}};
  auto v = f.OnRequestHead(unsigned_get);
  ASSERT_TRUE(v.ok());
  EXPECT_FALSE(v->handled);
}

TEST(AwsProxyFilterTest, HeaderSignatureIsReSignedAndForeignSecretsRefused) {
  proxy::RequestHead h = DocGet();
  auto v = Filter(kDocSecret, kOtherSecret).OnRequestHead(h);
  ASSERT_TRUE(v.ok()) << v.error().ToString();
  EXPECT_TRUE(v->handled);
  EXPECT_FALSE(v->need_full_body);
  EXPECT_FALSE(v->body);
  EXPECT_EQ(Find(h, "authorization")->find(kDocGetSig), std::string::npos);
  // The other direction restores the documented signature exactly: the filter's output is the
  // real signature for the same canonical request.
  auto back = Filter(kOtherSecret, kDocSecret).OnRequestHead(h);
  ASSERT_TRUE(back.ok()) << back.error().ToString();
  EXPECT_EQ(h.headers, DocGet().headers);

  // Signed with a secret that is not the placeholder: 403 (an error), nothing rewritten.
  proxy::RequestHead foreign = DocGet();
  auto refused = Filter("some-other-placeholder-secret", kOtherSecret).OnRequestHead(foreign);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().code(), ErrorCode::kPermissionDenied);
  EXPECT_EQ(refused.error().ToString().find(kOtherSecret), std::string::npos);
  EXPECT_EQ(foreign.headers, DocGet().headers);
  // SigV2 (or any other scheme) in scope is refused, not passed through.
  proxy::RequestHead v2{"GET", "/", "s3.amazonaws.com", 443,
                        {{"Host", "s3.amazonaws.com"}, {"Authorization", "AWS AKIAIOSFODNN7EXAMPLE:abc="}}};
  EXPECT_FALSE(Filter(kDocSecret, kOtherSecret).OnRequestHead(v2).ok());
}

TEST(AwsProxyFilterTest, ChunkedUploadBodyTransformReSignsEveryChunk) {
  std::string body = DocChunkedBody();
  proxy::RequestHead h = DocChunked();
  AwsProxyFilter to_other = Filter(kDocSecret, kOtherSecret);
  auto v = to_other.OnRequestHead(h);
  ASSERT_TRUE(v.ok()) << v.error().ToString();
  ASSERT_TRUE(v->body);
  std::string mid;
  for (size_t i = 0; i < body.size(); i += 777) {
    auto o = v->body->Data(std::string_view(body).substr(i, 777));
    ASSERT_TRUE(o.ok()) << o.error().ToString();
    mid += *o;
  }
  auto end = v->body->End();
  ASSERT_TRUE(end.ok());
  mid += *end;
  ASSERT_EQ(mid.size(), body.size());  // Content-Length stays right
  for (const char* sig : kDocChunkSigs) EXPECT_EQ(mid.find(sig), std::string::npos);

  AwsProxyFilter back = Filter(kOtherSecret, kDocSecret);
  auto v2 = back.OnRequestHead(h);
  ASSERT_TRUE(v2.ok());
  auto restored = v2->body->Data(mid);
  ASSERT_TRUE(restored.ok());
  ASSERT_TRUE(v2->body->End().ok());
  EXPECT_EQ(*restored, body);
  EXPECT_EQ(h.headers, DocChunked().headers);

  // A chunk altered in flight fails the body (the proxy aborts the upstream request).
  proxy::RequestHead h3 = DocChunked();
  auto v3 = Filter(kDocSecret, kOtherSecret).OnRequestHead(h3);
  ASSERT_TRUE(v3.ok());
  std::string tampered = body;
  tampered[100] = 'b';
  auto o = v3->body->Data(tampered);
  EXPECT_FALSE(o.ok() && v3->body->End().ok());
}

TEST(AwsProxyFilterTest, BodyHashedRequestAsksForTheFullBody) {
  const std::string body = "Action=GetCallerIdentity&Version=2011-06-15";
  RequestHead a{"POST", "/",
                {{"Host", "sts.us-east-1.amazonaws.com"},
                 {"Content-Type", "application/x-www-form-urlencoded; charset=utf-8"},
                 {"X-Amz-Date", "20240101T000000Z"}}};
  SigV4Auth auth;
  auth.access_key_id = kKeyId;
  auth.date = "20240101";
  auth.region = "us-east-1";
  auth.service = "sts";
  auth.amz_date = "20240101T000000Z";
  auth.signed_headers = {"content-type", "host", "x-amz-date"};
  auto cr = CanonicalRequest(a, auth, {UriMode::kDoubleEncode, QueryMode::kReencode, Sha256Hex(body)});
  ASSERT_TRUE(cr.ok());
  std::string sig = SignatureHex(SigningKey("PLACEHOLDER-SECRET-0123", "20240101", "us-east-1", "sts"),
                                 StringToSign(auth, *cr));
  proxy::RequestHead h{"POST", "/", "sts.us-east-1.amazonaws.com", 443, {}};
  for (const Header& x : a.headers) h.headers.emplace_back(x.name, x.value);
  h.headers.emplace_back("Content-Length", std::to_string(body.size()));
  h.headers.emplace_back("Authorization", std::string(kAlgorithm) + " Credential=" + kKeyId + "/" +
                                              auth.Scope() + ", SignedHeaders=" +
                                              auth.SignedHeadersString() + ", Signature=" + sig);
  AwsProxyFilter f = Filter("PLACEHOLDER-SECRET-0123", "REAL-SECRET-0123456789");
  auto v = f.OnRequestHead(h);
  ASSERT_TRUE(v.ok()) << v.error().ToString();
  EXPECT_TRUE(v->need_full_body);
  EXPECT_EQ(v->max_body, kMaxFullBody);
  proxy::RequestHead other_body = h;
  EXPECT_EQ(f.OnFullBody(other_body, body + "&Extra=1").error().code(), ErrorCode::kPermissionDenied);
  ASSERT_TRUE(f.OnFullBody(h, body).ok());
  std::string want = SignatureHex(SigningKey("REAL-SECRET-0123456789", "20240101", "us-east-1", "sts"),
                                  StringToSign(auth, *cr));
  EXPECT_NE(Find(h, "authorization")->find("Signature=" + want), std::string::npos);
}

vault::BoundCredential BoundAws(std::string token, std::string token_ph) {
  auto c = vault::MakeAwsCredential("ASIACLOISTERTEST0001", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYREALSECRET",
                                    token, "eu-west-1", {});
  EXPECT_TRUE(c.ok());
  return vault::BoundCredential{*c, "CLOISTERplaceholderSECRET/0123456789abcd", std::move(token_ph)};
}

TEST(AddAwsFiltersTest, WiresOneFilterTheCustodyFilterAndTheTokenPlaceholder) {
  proxy::ProxyConfig cfg;
  auto anthropic = vault::MakeCredential(vault::CredentialKind::kAnthropic,
                                         "sk-ant-api03-REALxANTHROPICx0123456789", {}, "", false);
  ASSERT_TRUE(anthropic.ok());
  cfg.credentials = {vault::BoundCredential{*anthropic, "sk-ant-api03-CLOISTERxx0123456789", ""},
                     BoundAws("IQoJb3JpZ2luX2VjEREALsessionTOKEN0123456789",
                              "IQoJCLOISTERplaceholderTOKEN0123456789abcd")};
  auto n = AddAwsFilters(cfg);
  ASSERT_TRUE(n.ok()) << n.error().ToString();
  EXPECT_EQ(*n, 1);
  ASSERT_EQ(cfg.extension_filters.size(), 2u);  // the re-signer, then credential custody (custody_test.cc)
  ASSERT_EQ(cfg.credentials.size(), 3u);
  const vault::BoundCredential& t = cfg.credentials[2];
  EXPECT_EQ(t.credential.id, kSessionTokenId);
  EXPECT_EQ(t.credential.kind, vault::CredentialKind::kAws);  // no header substitution
  EXPECT_EQ(t.credential.value, "IQoJb3JpZ2luX2VjEREALsessionTOKEN0123456789");
  EXPECT_EQ(t.placeholder, "IQoJCLOISTERplaceholderTOKEN0123456789abcd");
  EXPECT_EQ(t.credential.hosts, std::vector<std::string>{"amazonaws.com"});
  AwsSecrets s = SecretsFor(cfg.credentials[1]);
  EXPECT_EQ(s.access_key_id, "ASIACLOISTERTEST0001");
  EXPECT_EQ(s.placeholder_secret, "CLOISTERplaceholderSECRET/0123456789abcd");
  EXPECT_EQ(s.placeholder_token, "IQoJCLOISTERplaceholderTOKEN0123456789abcd");

  proxy::ProxyConfig no_token;
  no_token.credentials = {BoundAws("", "")};
  ASSERT_EQ(*AddAwsFilters(no_token), 1);
  EXPECT_EQ(no_token.credentials.size(), 1u);

  proxy::ProxyConfig missing;
  missing.credentials = {BoundAws("IQoJb3JpZ2luX2VjEREALsessionTOKEN0123456789", "")};
  EXPECT_FALSE(AddAwsFilters(missing).ok());
}

}  // namespace
}  // namespace cloister::aws
