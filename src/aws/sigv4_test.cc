// SigV4 against AWS's published test vectors (the SigV4 test suite and the S3 API reference
// examples), plus the parser's refusals.
#include "aws/sigv4.h"

#include <gtest/gtest.h>

#include "base/strings.h"

namespace cloister::aws {
namespace {

constexpr char kSuiteSecret[] = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY";
constexpr char kS3Secret[] = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY";

std::string SuiteAuth(const std::string& sig) {
  return "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, "
         "SignedHeaders=host;x-amz-date, Signature=" + sig;
}

// Signs `head` as its parsed auth says, with `secret`, and returns the hex signature.
std::string Recompute(const RequestHead& head, const std::string& secret, UriMode uri,
                      const std::string& payload) {
  auto auth = ParseSigV4(head);
  EXPECT_TRUE(auth.ok()) << auth.error().ToString();
  if (!auth.ok()) return "";
  auto cr = CanonicalRequest(head, *auth, CanonicalOptions{uri, QueryMode::kReencode, payload});
  EXPECT_TRUE(cr.ok()) << cr.error().ToString();
  if (!cr.ok()) return "";
  return SignatureHex(SigningKey(secret, auth->date, auth->region, auth->service),
                      StringToSign(*auth, *cr));
}

TEST(SigV4VectorsTest, SuiteGetVanilla) {
  const std::string sig = "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31";
  RequestHead head{"GET", "/", {{"Host", "example.amazonaws.com"}, {"X-Amz-Date", "20150830T123600Z"},
                                {"Authorization", SuiteAuth(sig)}}};
  auto auth = ParseSigV4(head);
  ASSERT_TRUE(auth.ok());
  auto cr = CanonicalRequest(head, *auth, {UriMode::kDoubleEncode, QueryMode::kReencode, std::string(kEmptySha256)});
  ASSERT_TRUE(cr.ok());
  // The suite's canonical request and string to sign (get-vanilla.creq / .sts).
  EXPECT_EQ(*cr, "GET\n/\n\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\nhost;x-amz-date\n" +
                     std::string(kEmptySha256));
  EXPECT_EQ(StringToSign(*auth, *cr),
            "AWS4-HMAC-SHA256\n20150830T123600Z\n20150830/us-east-1/service/aws4_request\n"
            "bb579772317eb040ac9ed261061d46c1f17a8133879d6129b6e1c25292927e63");
  EXPECT_EQ(Recompute(head, kSuiteSecret, UriMode::kDoubleEncode, std::string(kEmptySha256)), sig);
}

TEST(SigV4VectorsTest, SuiteQueryOrderAndPostVanilla) {
  RequestHead q{"GET", "/?Param2=value2&Param1=value1",
                {{"Host", "example.amazonaws.com"}, {"X-Amz-Date", "20150830T123600Z"},
                 {"Authorization", SuiteAuth(std::string(64, '0'))}}};
  EXPECT_EQ(Recompute(q, kSuiteSecret, UriMode::kDoubleEncode, std::string(kEmptySha256)),
            "b97d918cfa904a5beff61c982a1b6f458b799221646efd99d3219ec94cdf2500");
  RequestHead post = q;
  post.method = "POST";
  post.target = "/";
  EXPECT_EQ(Recompute(post, kSuiteSecret, UriMode::kDoubleEncode, std::string(kEmptySha256)),
            "5da7c1a2acd57cee7505fc6676e4e544621c30862966e37dddb68e92efbe5d6b");
}

TEST(SigV4VectorsTest, S3GetObjectHeaderForm) {
  // S3 API reference, "Example: GET Object" (first 10 bytes of test.txt).
  RequestHead head{"GET", "/test.txt",
                   {{"Host", "examplebucket.s3.amazonaws.com"},
                    {"Range", "bytes=0-9"},
                    {"x-amz-content-sha256", std::string(kEmptySha256)},
                    {"x-amz-date", "20130524T000000Z"},
                    {"Authorization",
                     "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request,"
                     "SignedHeaders=host;range;x-amz-content-sha256;x-amz-date,"
                     "Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41"}}};
  auto auth = ParseSigV4(head);
  ASSERT_TRUE(auth.ok()) << auth.error().ToString();
  auto cr = CanonicalRequest(head, *auth, {UriMode::kAsIs, QueryMode::kReencode, std::string(kEmptySha256)});
  ASSERT_TRUE(cr.ok());
  EXPECT_EQ(Sha256Hex(*cr), "7344ae5b7ee6c3e7e6b0fe0640412a37625d1fbfff95c48bbb2dc43964946972");
  EXPECT_EQ(Recompute(head, kS3Secret, UriMode::kAsIs, std::string(kEmptySha256)), auth->signature);
}

TEST(SigV4VectorsTest, S3PresignedGet) {
  // S3 API reference, query-string authentication example (86400 s).
  RequestHead head{"GET",
                   "/test.txt?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKIAIOSFODNN7EXAMPLE%2F"
                   "20130524%2Fus-east-1%2Fs3%2Faws4_request&X-Amz-Date=20130524T000000Z&X-Amz-Expires="
                   "86400&X-Amz-SignedHeaders=host&X-Amz-Signature="
                   "aeeed9bbccd4d02ee5c0109b86d86835f995330da4c265957d157751f604d404",
                   {{"Host", "examplebucket.s3.amazonaws.com"}}};
  auto auth = ParseSigV4(head);
  ASSERT_TRUE(auth.ok()) << auth.error().ToString();
  EXPECT_EQ(auth->form, SigV4Auth::Form::kQuery);
  EXPECT_EQ(auth->access_key_id, "AKIAIOSFODNN7EXAMPLE");
  EXPECT_EQ(auth->service, "s3");
  auto cr = CanonicalRequest(head, *auth, {UriMode::kAsIs, QueryMode::kReencode, std::string(kUnsignedPayload)});
  ASSERT_TRUE(cr.ok());
  EXPECT_EQ(Sha256Hex(*cr), "3bfa292879f6447bbcda7001decf97f4a54dc650c8942174ae0a9121cf58ad04");
  EXPECT_EQ(Recompute(head, kS3Secret, UriMode::kAsIs, std::string(kUnsignedPayload)), auth->signature);
}

TEST(SigV4Test, UriEncodingFollowsAwsRules) {
  EXPECT_EQ(UriEncode("a b/c~d_e.f-g*h", true), "a%20b/c~d_e.f-g%2Ah");
  EXPECT_EQ(UriEncode("a/b", false), "a%2Fb");
  EXPECT_EQ(*UriDecode("a%2Fb%2fc+d"), "a/b/c+d");
  EXPECT_FALSE(UriDecode("%4").ok());
  EXPECT_FALSE(UriDecode("%zz").ok());
  EXPECT_FALSE(UriDecode("abc%").ok());
}

TEST(SigV4Test, NonS3PathIsNormalisedAndDoubleEncoded) {
  RequestHead head{"GET", "/a/./b/../c%20d//e",
                   {{"Host", "example.amazonaws.com"}, {"X-Amz-Date", "20150830T123600Z"},
                    {"Authorization", SuiteAuth(std::string(64, '0'))}}};
  auto auth = ParseSigV4(head);
  ASSERT_TRUE(auth.ok());
  auto cr = CanonicalRequest(head, *auth, {UriMode::kDoubleEncode, QueryMode::kReencode, "x"});
  ASSERT_TRUE(cr.ok());
  EXPECT_EQ(Split(*cr, '\n')[1], "/a/c%2520d/e");
  auto s3 = CanonicalRequest(head, *auth, {UriMode::kAsIs, QueryMode::kReencode, "x"});
  EXPECT_EQ(Split(*s3, '\n')[1], "/a/./b/../c%20d//e");
}

TEST(SigV4Test, MultiValueHeadersAreJoinedAndSpacesCollapsed) {
  RequestHead head{"GET", "/",
                   {{"Host", "example.amazonaws.com"}, {"X-Amz-Date", "20150830T123600Z"},
                    {"My-Header1", "  value1   a  b  "}, {"my-header1", "value2"},
                    {"Authorization",
                     "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, "
                     "SignedHeaders=host;my-header1;x-amz-date, Signature=" + std::string(64, 'a')}}};
  auto auth = ParseSigV4(head);
  ASSERT_TRUE(auth.ok());
  auto cr = CanonicalRequest(head, *auth, {UriMode::kDoubleEncode, QueryMode::kReencode, "x"});
  ASSERT_TRUE(cr.ok());
  EXPECT_NE(cr->find("my-header1:value1 a b,value2\n"), std::string::npos) << *cr;
}

TEST(SigV4Test, ParserRefusesMalformedSignatures) {
  auto parse = [](std::string authz, std::string date = "20150830T123600Z") {
    RequestHead head{"GET", "/", {{"Host", "h"}, {"X-Amz-Date", date}, {"Authorization", authz}}};
    return ParseSigV4(head);
  };
  const std::string good_sig = std::string(64, 'a');
  EXPECT_TRUE(parse(SuiteAuth(good_sig)).ok());
  EXPECT_EQ(parse("AWS AKID:sig").error().code(), ErrorCode::kInvalidArgument);  // SigV2
  EXPECT_EQ(parse("AWS4-ECDSA-P256-SHA256 Credential=x").error().code(), ErrorCode::kInvalidArgument);
  EXPECT_FALSE(parse(SuiteAuth(std::string(63, 'a'))).ok());
  EXPECT_FALSE(parse(SuiteAuth(std::string(64, 'A'))).ok());
  EXPECT_FALSE(parse(SuiteAuth(good_sig), "20150831T123600Z").ok());  // date vs scope
  EXPECT_FALSE(parse(SuiteAuth(good_sig), "2015-08-30").ok());
  EXPECT_FALSE(parse("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, "
                     "SignedHeaders=x-amz-date;host, Signature=" + good_sig).ok());  // unsorted
  EXPECT_FALSE(parse("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, "
                     "SignedHeaders=x-amz-date, Signature=" + good_sig).ok());  // no host
  EXPECT_FALSE(parse("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service, "
                     "SignedHeaders=host, Signature=" + good_sig).ok());
  EXPECT_FALSE(parse("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, "
                     "SignedHeaders=host, Signature=" + good_sig + ", Signature=" + good_sig).ok());
  EXPECT_FALSE(parse("AWS4-HMAC-SHA256 ").ok());
  // Both forms at once, and a signed header that is absent.
  RequestHead both{"GET", "/?X-Amz-Signature=" + good_sig,
                   {{"Host", "h"}, {"X-Amz-Date", "20150830T123600Z"}, {"Authorization", SuiteAuth(good_sig)}}};
  EXPECT_FALSE(ParseSigV4(both).ok());
  RequestHead missing{"GET", "/", {{"X-Amz-Date", "20150830T123600Z"}, {"Authorization", SuiteAuth(good_sig)}}};
  auto auth = ParseSigV4(missing);
  ASSERT_TRUE(auth.ok());
  EXPECT_FALSE(CanonicalRequest(missing, *auth, {}).ok());
  // Not signed at all.
  RequestHead plain{"GET", "/", {{"Host", "h"}}};
  EXPECT_EQ(ParseSigV4(plain).error().code(), ErrorCode::kNotFound);
  EXPECT_FALSE(LooksSigV4Signed(plain));
}

}  // namespace
}  // namespace cloister::aws
