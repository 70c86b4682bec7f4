// Real curl through the proxy, TLS on both legs, real host names mapped to local fakes through the
// resolve override. Label: integration (needs curl). Nothing leaves 127.0.0.1 (resolve_only).
#include <gtest/gtest.h>

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

class TestFilter : public RequestFilter {
 public:
  explicit TestFilter(std::string mode) : mode_(std::move(mode)) {}
  Result<FilterVerdict> OnRequestHead(RequestHead& head) override {
    if (head.host != "api.anthropic.com") return FilterVerdict{};
    if (mode_ == "deny") return Error(ErrorCode::kPermissionDenied, "signature mismatch");
    if (mode_ == "trip") return Error(ErrorCode::kCompromised, "token replayed elsewhere");
    head.headers.push_back({"X-Signed", "yes:" + head.method + ":" + head.target});
    FilterVerdict v;
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
    env.filters = {std::make_shared<TestFilter>(mode)};
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
    env.filters = {std::make_shared<TestFilter>("deny")};
    env.StartProxy({{"api.anthropic.com:443", (*up)->Address()}});
    EXPECT_EQ(Curl(env, {"https://api.anthropic.com/v1"}).code, 403);
    EXPECT_TRUE((*up)->requests().empty());
    EXPECT_FALSE(env.proxy->compromised());
  }
  {
    ProxyEnv env;
    auto up = FakeUpstream::Start(env.upstream_ca, Hello());
    env.filters = {std::make_shared<TestFilter>("trip")};
    env.StartProxy({{"api.anthropic.com:443", (*up)->Address()}});
    EXPECT_EQ(Curl(env, {"https://api.anthropic.com/v1"}).code, 451);
    EXPECT_TRUE((*up)->requests().empty());
    EXPECT_TRUE(env.proxy->compromised());
    EXPECT_EQ(env.Events().size(), 1u);
  }
}

}  // namespace
}  // namespace cloister::proxy::testing
