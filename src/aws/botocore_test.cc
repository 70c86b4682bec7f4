// The re-signer against an independent SigV4 implementation (label: integration): botocore
// (Debian's python3-botocore) signs a set of requests with the PLACEHOLDER credentials as a guest
// SDK would, cloister re-signs them, and botocore verifies the results with the REAL credentials.
// The originals (placeholder-signed) must fail that verification, and a request botocore signed
// with the real secret directly must be refused by the re-signer.
#include <gtest/gtest.h>
#include <openssl/evp.h>

#include <nlohmann/json.hpp>

#include "aws/resigner.h"
#include "base/subprocess.h"

namespace cloister::aws {
namespace {

const char* kPython = "/usr/bin/python3";

std::string Tool() {
  const char* src = std::getenv("CLOISTER_SOURCE_DIR");
  return std::string(src ? src : ".") + "/src/aws/testdata/sigv4_tool.py";
}

std::string B64Decode(const std::string& in) {
  std::string out(in.size() / 4 * 3 + 3, '\0');
  int n = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                          reinterpret_cast<const unsigned char*>(in.data()), static_cast<int>(in.size()));
  if (n < 0) return "";
  size_t pad = 0;
  if (!in.empty() && in.back() == '=') pad++;
  if (in.size() > 1 && in[in.size() - 2] == '=') pad++;
  out.resize(static_cast<size_t>(n) - pad);
  return out;
}

std::string B64Encode(const std::string& in) {
  std::string out(4 * ((in.size() + 2) / 3) + 1, '\0');
  int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                          reinterpret_cast<const unsigned char*>(in.data()), static_cast<int>(in.size()));
  out.resize(static_cast<size_t>(n));
  return out;
}

nlohmann::json RunTool(const std::string& cmd, const nlohmann::json& input) {
  RunOptions opts;
  opts.stdin_data = input.dump();
  opts.timeout = std::chrono::seconds(60);
  auto out = RunProcess({kPython, Tool(), cmd}, opts);
  EXPECT_TRUE(out.ok() && out->success()) << (out.ok() ? out->err : out.error().ToString());
  if (!out.ok()) return {};
  auto doc = nlohmann::json::parse(out->out, nullptr, false);
  EXPECT_FALSE(doc.is_discarded()) << out->out;
  return doc;
}

class BotocoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!ProgramExists(kPython)) GTEST_SKIP() << "python3 not installed";
    auto probe = RunProcess({kPython, "-c", "import botocore"});
    if (!probe.ok() || !probe->success()) GTEST_SKIP() << "python3-botocore not installed";
  }
  const nlohmann::json placeholder_ = {
      {"access_key_id", "AKIACLOISTERTEST0001"}, {"secret", "CLOISTERplaceholder/secret+0000000000000"},
      {"token", "IQoJb3JpZ2luX2VjPLACEHOLDER"}};
  const nlohmann::json real_ = {
      {"access_key_id", "AKIACLOISTERTEST0001"}, {"secret", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYzREALKEY"},
      {"token", "IQoJb3JpZ2luX2VjREALTOKEN"}};
  AwsSecrets Secrets() const {
    return AwsSecrets{real_["access_key_id"], real_["secret"], real_["token"], placeholder_["secret"],
                      placeholder_["token"]};
  }
};

// Re-signs one request JSON in place; returns the error if refused.
Status ResignJson(const Resigner& r, nlohmann::json& req) {
  RequestHead head;
  head.method = req["method"];
  head.target = req["target"];
  for (auto& h : req["headers"]) head.headers.push_back({h[0], h[1]});
  std::string body = B64Decode(req["body_b64"]);
  ASSIGN_OR_RETURN(Resigner::Verdict v, r.Resign(head));
  if (v.need_full_body) RETURN_IF_ERROR(r.ResignWithBody(head, body));
  if (v.chunks) {
    std::string out;
    for (size_t i = 0; i < body.size(); i += 8191) {
      ASSIGN_OR_RETURN(std::string o, v.chunks->Data(std::string_view(body).substr(i, 8191)));
      out += o;
    }
    RETURN_IF_ERROR(v.chunks->End());
    EXPECT_EQ(out.size(), body.size());
    body = out;
  }
  req["target"] = head.target;
  req["headers"] = nlohmann::json::array();
  for (auto& h : head.headers) req["headers"].push_back({h.name, h.value});
  req["body_b64"] = B64Encode(body);
  return OkStatus();
}

TEST_F(BotocoreTest, ReSignedRequestsVerifyWithRealSecretOnly) {
  nlohmann::json signed_reqs = RunTool("sign", {{"creds", placeholder_}});
  ASSERT_TRUE(signed_reqs.contains("requests"));
  nlohmann::json originals = signed_reqs["requests"];
  ASSERT_EQ(originals.size(), 6u);  // sts POST, ec2 query, s3 PUT/GET, presigned, streaming

  // The placeholder-signed originals do not pass the real-secret verifier.
  nlohmann::json before = RunTool("verify", {{"creds", real_}, {"requests", originals}});
  for (auto& res : before["results"]) EXPECT_FALSE(res["ok"].get<bool>()) << res.dump();

  Resigner r(Secrets());
  nlohmann::json resigned = originals;
  for (auto& req : resigned) {
    Status st = ResignJson(r, req);
    ASSERT_TRUE(st.ok()) << req["method"] << " " << req["target"] << ": " << st.error().ToString();
  }
  nlohmann::json after = RunTool("verify", {{"creds", real_}, {"requests", resigned}});
  ASSERT_EQ(after["results"].size(), originals.size());
  for (size_t i = 0; i < originals.size(); ++i) {
    EXPECT_TRUE(after["results"][i]["ok"].get<bool>())
        << originals[i]["method"] << " " << originals[i]["target"] << ": " << after["results"][i].dump();
  }
  // Neither the placeholder token nor the placeholder secret is in what goes out.
  std::string wire = resigned.dump();
  EXPECT_EQ(wire.find(placeholder_["token"].get<std::string>()), std::string::npos);
  EXPECT_NE(wire.find(real_["token"].get<std::string>()), std::string::npos);
}

TEST_F(BotocoreTest, RequestSignedWithAnyOtherSecretIsRefused) {
  Resigner r(Secrets());
  // The real secret itself (with the placeholder token, so only the secret differs), and another.
  nlohmann::json real_secret = {{"access_key_id", real_["access_key_id"]}, {"secret", real_["secret"]},
                                {"token", placeholder_["token"]}};
  for (const nlohmann::json& creds : {real_secret, nlohmann::json{{"access_key_id", "AKIACLOISTERTEST0001"},
                                                           {"secret", "some-other-secret"},
                                                           {"token", placeholder_["token"]}}}) {
    nlohmann::json reqs = RunTool("sign", {{"creds", creds}})["requests"];
    ASSERT_FALSE(reqs.empty());
    for (auto& req : reqs) {
      Status st = ResignJson(r, req);
      ASSERT_FALSE(st.ok()) << req["target"];
      EXPECT_EQ(st.error().code(), ErrorCode::kPermissionDenied) << st.error().ToString();
    }
  }
}

}  // namespace
}  // namespace cloister::aws
