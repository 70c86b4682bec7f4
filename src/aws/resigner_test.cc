#include "aws/resigner.h"

#include <gtest/gtest.h>

#include "aws/doc_vectors.h"
#include "base/strings.h"

namespace cloister::aws {
namespace {

using namespace doc;  // NOLINT: the documentation's vectors

AwsSecrets Secrets(std::string placeholder, std::string real, std::string ph_token = "",
                   std::string real_token = "") {
  return AwsSecrets{kKeyId, std::move(real), std::move(real_token), std::move(placeholder),
                    std::move(ph_token)};
}

// S3 API reference, "Transferring Payload in Multiple Chunks": 66560 bytes of 'a' in chunks of
// 65536, 1024 and 0, with the documented seed and chunk signatures.
RequestHead DocChunkedHead() {
  return RequestHead{
      "PUT", "/examplebucket/chunkObject.txt",
      {{"Host", "s3.amazonaws.com"},
       {"x-amz-date", "20130524T000000Z"},
       {"x-amz-storage-class", "REDUCED_REDUNDANCY"},
       {"Authorization",
        "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request,"
        "SignedHeaders=content-encoding;content-length;host;x-amz-content-sha256;x-amz-date;"
        "x-amz-decoded-content-length;x-amz-storage-class,"
        "Signature=4f232c4386841ef735655705268965c44a0e4690baa4adea153f7db9fa80a0a9"},
       {"x-amz-content-sha256", "STREAMING-AWS4-HMAC-SHA256-PAYLOAD"},
       {"Content-Encoding", "aws-chunked"},
       {"x-amz-decoded-content-length", "66560"},
       {"Content-Length", "66824"}}};
}

// Feeds `body` through the chunk re-signer in pieces of `piece` bytes.
Result<std::string> Stream(ChunkResigner& c, const std::string& body, size_t piece) {
  std::string out;
  for (size_t i = 0; i < body.size(); i += piece) {
    ASSIGN_OR_RETURN(std::string o, c.Data(std::string_view(body).substr(i, piece)));
    out += o;
  }
  RETURN_IF_ERROR(c.End());
  return out;
}

TEST(ResignerTest, DocumentedChunkedUploadRoundTripsThroughAnotherSecret) {
  // Guest = the documented request (its signatures are made with kDocSecret, here the
  // placeholder). Re-sign to kOtherSecret, then back: the result must be byte-identical to the
  // documentation, which proves every re-signed signature (seed and each chunk) is the real one.
  std::string body = DocChunkedBody();
  ASSERT_EQ(body.size(), 66824u);
  RequestHead head = DocChunkedHead();
  Resigner to_other(Secrets(kDocSecret, kOtherSecret));
  auto v1 = to_other.Resign(head);
  ASSERT_TRUE(v1.ok()) << v1.error().ToString();
  ASSERT_TRUE(v1->chunks);
  EXPECT_EQ(head.Find("authorization")->find("4f232c43"), std::string::npos);
  auto mid = Stream(*v1->chunks, body, 1000);
  ASSERT_TRUE(mid.ok()) << mid.error().ToString();
  EXPECT_EQ(mid->size(), body.size());
  EXPECT_EQ(v1->chunks->chunks(), 3u);
  for (const char* sig : kDocChunkSigs) EXPECT_EQ(mid->find(sig), std::string::npos);

  Resigner back(Secrets(kOtherSecret, kDocSecret));
  auto v2 = back.Resign(head);
  ASSERT_TRUE(v2.ok()) << v2.error().ToString();
  ASSERT_TRUE(v2->chunks);
  EXPECT_NE(head.Find("authorization")->find(
                "Signature=4f232c4386841ef735655705268965c44a0e4690baa4adea153f7db9fa80a0a9"),
            std::string::npos);
  auto final_body = Stream(*v2->chunks, *mid, 4096);
  ASSERT_TRUE(final_body.ok()) << final_body.error().ToString();
  EXPECT_EQ(*final_body, body);
}

TEST(ResignerTest, ChunkFramingIsSplitAnywhere) {
  std::string body = DocChunkedBody();
  for (size_t piece : {1u, 7u, 65536u, 70000u}) {
    RequestHead head = DocChunkedHead();
    Resigner r(Secrets(kDocSecret, kOtherSecret));
    auto v = r.Resign(head);
    ASSERT_TRUE(v.ok());
    auto out = Stream(*v->chunks, body, piece);
    ASSERT_TRUE(out.ok()) << piece << ": " << out.error().ToString();
    EXPECT_EQ(out->size(), body.size());
  }
}

TEST(ResignerTest, TamperedChunksAndBadFramingAreRefused) {
  auto run = [](const std::string& body) {
    RequestHead head = DocChunkedHead();
    Resigner r(Secrets(kDocSecret, kOtherSecret));
    auto v = r.Resign(head);
    EXPECT_TRUE(v.ok());
    return Stream(*v->chunks, body, 4096);
  };
  std::string body = DocChunkedBody();
  std::string flipped = body;
  flipped[5000] = 'b';
  auto r1 = run(flipped);
  ASSERT_FALSE(r1.ok());
  EXPECT_EQ(r1.error().code(), ErrorCode::kPermissionDenied);
  std::string badsig = body;
  badsig[30] = badsig[30] == '0' ? '1' : '0';
  EXPECT_FALSE(run(badsig).ok());
  // Cut before the final chunk; extra bytes after it; bare LF; a second extension.
  EXPECT_FALSE(run(body.substr(0, body.rfind("0;chunk-signature="))).ok());
  EXPECT_FALSE(run(body + "x").ok());
  std::string lf = body;
  lf.replace(lf.find("\r\n"), 2, "\n");
  EXPECT_FALSE(run(lf).ok());
  std::string ext = body;
  ext.insert(ext.find("\r\n"), ";x=y");
  EXPECT_FALSE(run(ext).ok());
  std::string huge = "ffffffff;chunk-signature=" + std::string(kDocChunkSigs[0]) + "\r\n";
  EXPECT_FALSE(run(huge).ok());
}

TEST(ResignerTest, HeaderFormReSignsWithRealSecretAndSessionToken) {
  // The S3 GET Object example, signed by the "guest" with kDocSecret (here the placeholder).
  RequestHead head{"GET", "/test.txt",
                   {{"Host", "examplebucket.s3.amazonaws.com"},
                    {"Range", "bytes=0-9"},
                    {"x-amz-content-sha256", std::string(kEmptySha256)},
                    {"x-amz-date", "20130524T000000Z"},
                    {"Authorization",
                     "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request,"
                     "SignedHeaders=host;range;x-amz-content-sha256;x-amz-date,"
                     "Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41"}}};
  RequestHead original = head;
  Resigner r(Secrets(kDocSecret, kOtherSecret));
  auto v = r.Resign(head);
  ASSERT_TRUE(v.ok()) << v.error().ToString();
  EXPECT_FALSE(v->need_full_body);
  EXPECT_FALSE(v->chunks);
  // Only the signature changed, and it is what kOtherSecret gives for the same canonical request.
  auto auth = ParseSigV4(head);
  ASSERT_TRUE(auth.ok());
  auto cr = CanonicalRequest(head, *auth, {UriMode::kAsIs, QueryMode::kReencode, std::string(kEmptySha256)});
  EXPECT_EQ(auth->signature, SignatureHex(SigningKey(kOtherSecret, "20130524", "us-east-1", "s3"),
                                          StringToSign(*auth, *cr)));
  EXPECT_NE(auth->signature, "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41");
  for (size_t i = 0; i < head.headers.size(); ++i) {
    if (head.headers[i].name != "Authorization") EXPECT_EQ(head.headers[i].value, original.headers[i].value);
  }
  // Re-signing the result again with the same object is refused: it is now signed with the real
  // secret, not the placeholder.
  auto again = r.Resign(head);
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.error().code(), ErrorCode::kPermissionDenied);
}

TEST(ResignerTest, SessionTokenPlaceholderIsSwappedAndChecked) {
  const std::string ph_token = "FQoGZXIvYXdzEPLACEHOLDERtoken";
  const std::string real_token = "FQoGZXIvYXdzEREALSESSIONtoken";
  // A guest request signed with the placeholder secret and carrying the placeholder token.
  RequestHead head{"GET", "/?Action=GetCallerIdentity&Version=2011-06-15",
                   {{"Host", "sts.amazonaws.com"}, {"X-Amz-Date", "20240101T000000Z"},
                    {"X-Amz-Security-Token", ph_token}}};
  SigV4Auth auth;
  auth.access_key_id = kKeyId;
  auth.date = "20240101";
  auth.region = "us-east-1";
  auth.service = "sts";
  auth.amz_date = "20240101T000000Z";
  auth.signed_headers = {"host", "x-amz-date", "x-amz-security-token"};
  auto cr = CanonicalRequest(head, auth, {UriMode::kDoubleEncode, QueryMode::kReencode, std::string(kEmptySha256)});
  ASSERT_TRUE(cr.ok());
  std::string sig = SignatureHex(SigningKey("PLACEHOLDER-SECRET", auth.date, auth.region, auth.service),
                                 StringToSign(auth, *cr));
  head.headers.push_back({"Authorization", std::string(kAlgorithm) + " Credential=" + kKeyId +
                                               "/" + auth.Scope() + ", SignedHeaders=" +
                                               auth.SignedHeadersString() + ", Signature=" + sig});
  RequestHead wrong_token = head;
  wrong_token.Set("x-amz-security-token", "FQoGZXIvYXdzESOMEOTHERtoken");
  // What the proxy forwards after its header substitution ran first: the real token in the header,
  // the guest's signature over the placeholder token. Accepted, and re-signed the same way.
  RequestHead substituted = head;
  substituted.Set("x-amz-security-token", real_token);

  Resigner r(Secrets("PLACEHOLDER-SECRET", "REAL-SECRET", ph_token, real_token));
  auto v = r.Resign(head);
  ASSERT_TRUE(v.ok()) << v.error().ToString();
  EXPECT_EQ(*head.Find("x-amz-security-token"), real_token);
  auto real_auth = ParseSigV4(head);
  auto real_cr = CanonicalRequest(head, *real_auth, {UriMode::kDoubleEncode, QueryMode::kReencode, std::string(kEmptySha256)});
  EXPECT_EQ(real_auth->signature, SignatureHex(SigningKey("REAL-SECRET", "20240101", "us-east-1", "sts"),
                                               StringToSign(*real_auth, *real_cr)));
  EXPECT_EQ(r.Resign(wrong_token).error().code(), ErrorCode::kPermissionDenied);
  ASSERT_TRUE(r.Resign(substituted).ok());
  EXPECT_EQ(*substituted.Find("x-amz-security-token"), real_token);
  EXPECT_EQ(*substituted.Find("authorization"), *head.Find("authorization"));
  // A credential without a token refuses a request carrying one.
  Resigner no_token(Secrets("PLACEHOLDER-SECRET", "REAL-SECRET"));
  RequestHead h2 = wrong_token;
  EXPECT_EQ(no_token.Resign(h2).error().code(), ErrorCode::kPermissionDenied);
}

TEST(ResignerTest, PresignedQueryIsReSigned) {
  const std::string target =
      "/test.txt?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKIAIOSFODNN7EXAMPLE%2F"
      "20130524%2Fus-east-1%2Fs3%2Faws4_request&X-Amz-Date=20130524T000000Z&X-Amz-Expires="
      "86400&X-Amz-SignedHeaders=host&X-Amz-Signature="
      "aeeed9bbccd4d02ee5c0109b86d86835f995330da4c265957d157751f604d404";
  RequestHead head{"GET", target, {{"Host", "examplebucket.s3.amazonaws.com"}}};
  Resigner r(Secrets(kDocSecret, kOtherSecret));
  ASSERT_TRUE(r.Resign(head).ok());
  EXPECT_EQ(head.target.substr(0, head.target.size() - 64), target.substr(0, target.size() - 64));
  EXPECT_NE(head.target, target);
  Resigner back(Secrets(kOtherSecret, kDocSecret));
  ASSERT_TRUE(back.Resign(head).ok());
  EXPECT_EQ(head.target, target);
}

TEST(ResignerTest, RefusesOtherKeysSecretsAndSchemes) {
  RequestHead head = DocChunkedHead();
  // Signed with kDocSecret, but the workspace's placeholder is something else.
  EXPECT_EQ(Resigner(Secrets("not-the-doc-secret", kOtherSecret)).Resign(head).error().code(),
            ErrorCode::kPermissionDenied);
  AwsSecrets other_key = Secrets(kDocSecret, kOtherSecret);
  other_key.access_key_id = "AKIAOTHERKEY0000";
  EXPECT_EQ(Resigner(other_key).Resign(head).error().code(), ErrorCode::kPermissionDenied);
  // A signed header changed after signing.
  RequestHead tampered = DocChunkedHead();
  tampered.Set("x-amz-storage-class", "STANDARD");
  EXPECT_EQ(Resigner(Secrets(kDocSecret, kOtherSecret)).Resign(tampered).error().code(),
            ErrorCode::kPermissionDenied);
  RequestHead trailer = DocChunkedHead();
  trailer.Set("x-amz-content-sha256", "STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER");
  EXPECT_EQ(Resigner(Secrets(kDocSecret, kOtherSecret)).Resign(trailer).error().code(),
            ErrorCode::kInvalidArgument);
  RequestHead v2{"GET", "/", {{"Host", "s3.amazonaws.com"}, {"Authorization", "AWS AKIAIOSFODNN7EXAMPLE:abc="}}};
  EXPECT_EQ(Resigner(Secrets(kDocSecret, kOtherSecret)).Resign(v2).error().code(),
            ErrorCode::kInvalidArgument);
}

TEST(ResignerTest, BodyHashedServicesNeedTheBody) {
  const std::string body = "Action=GetCallerIdentity&Version=2011-06-15";
  RequestHead head{"POST", "/",
                   {{"Host", "sts.us-east-1.amazonaws.com"},
                    {"Content-Type", "application/x-www-form-urlencoded; charset=utf-8"},
                    {"Content-Length", std::to_string(body.size())},
                    {"X-Amz-Date", "20240101T000000Z"}}};
  SigV4Auth auth;
  auth.access_key_id = kKeyId;
  auth.date = "20240101";
  auth.region = "us-east-1";
  auth.service = "sts";
  auth.amz_date = "20240101T000000Z";
  auth.signed_headers = {"content-type", "host", "x-amz-date"};
  auto cr = CanonicalRequest(head, auth, {UriMode::kDoubleEncode, QueryMode::kReencode, Sha256Hex(body)});
  std::string sig = SignatureHex(SigningKey("PH", "20240101", "us-east-1", "sts"), StringToSign(auth, *cr));
  head.headers.push_back({"Authorization", std::string(kAlgorithm) + " Credential=" + kKeyId + "/" +
                                               auth.Scope() + ", SignedHeaders=" +
                                               auth.SignedHeadersString() + ", Signature=" + sig});
  Resigner r(Secrets("PH", "REAL"));
  auto v = r.Resign(head);
  ASSERT_TRUE(v.ok());
  EXPECT_TRUE(v->need_full_body);
  EXPECT_NE(head.Find("authorization")->find(sig), std::string::npos);  // untouched so far
  RequestHead bad = head;
  EXPECT_EQ(r.ResignWithBody(bad, body + "&x=1").error().code(), ErrorCode::kPermissionDenied);
  ASSERT_TRUE(r.ResignWithBody(head, body).ok());
  auto real_auth = ParseSigV4(head);
  EXPECT_EQ(real_auth->signature,
            SignatureHex(SigningKey("REAL", "20240101", "us-east-1", "sts"), StringToSign(auth, *cr)));
}

}  // namespace
}  // namespace cloister::aws
