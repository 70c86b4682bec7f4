// Every way a real value goes into a request, through the supervisor's real wiring (Egress::Start:
// the vault, AddAwsFilters, AddOauthFilters, the proxy) with real curl as the guest's client and
// one fake upstream on 127.0.0.1 for every host (resolve override, test CA). Issue 37:
//   item 1: for EVERY credential kind (and the body swap), a request that would get its real value
//     counts as a use: with `ask always` and nobody to ask it is refused (403) and the upstream sees
//     nothing; the same request with `ask off` gets the real value (so the first half proves
//     something). The policy is read from the vault at each start (a restart keeps it).
//   item 3: for every swapping filter (header substitution, body swap, OAuth access token, AWS
//     re-signing with its session token), an upstream that echoes the request back (headers, body,
//     base64) hands the guest no real value, and the trace names each swap.
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "aws/sigv4.h"
#include "base/strings.h"
#include "oauth/fake_provider.h"
#include "oauth/host_login.h"
#include "oauth/test_util.h"
#include "proxy/ca.h"
#include "proxy/fake_upstream.h"
#include "proxy/test_env.h"
#include "proxy/trace.h"
#include "supervisor/egress.h"
#include "vault/crypto.h"
#include "vault/placeholder.h"
#include "vault/vault.h"

namespace cloister::vm {
namespace {

namespace fs = std::filesystem;
using proxy::testing::CurlOut;
using vault::CredentialKind;

const std::string kAnthropic = "sk-ant-api03-REALxANTHROPICx" + std::string(60, 'a') + "-AA";
const std::string kOpenai = "sk-proj-REALxOPENAIx" + std::string(48, 'o');
const std::string kGithub = "ghp_REALGITHUBxSECRETx0123456789abcdefgh";
const std::string kGitlab = "glpat-REALxGITLABxSECRETx01";
const std::string kHeaderValue = "REALxCUSTOMxHEADERxVALUEx0123456789";
const std::string kBodyValue = "REALxBODYxSECRETxVALUEx0123456789";
const std::string kAwsKeyId = "ASIACLOISTERSWAPS001";
const std::string kAwsSecret = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYREALSECRET";
const std::string kAwsToken = "IQoJb3JpZ2luX2VjEREALxSESSIONxTOKENx0123456789abcdef";

// One way a real value goes into a request: the request the guest sends, and how the upstream
// tells that it got the real value.
struct Use {
  std::string credential;  // the vault id
  std::string host;
  std::function<CurlOut()> send;
  std::function<bool(const proxy::testing::SeenRequest&)> got_real;
  std::vector<std::string> reals;  // the real values this use puts on the wire
};

class EgressSwapsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/cloister-swaps-XXXXXX";
    dir_ = mkdtemp(tmpl);
    fs::create_directories(dir_ + "/keys");
    fs::permissions(dir_ + "/keys", fs::perms::owner_all);
    opts_.workspace = "ws";
    opts_.keys_dir = dir_ + "/keys";
    opts_.secrets_file = dir_ + "/secrets.enc";
    opts_.trace_log = dir_ + "/trace.jsonl";
    opts_.key_backend = vault::KeyBackend::kFile;
    auto ca = proxy::CertAuthority::CreateInMemory("swaps upstream CA");
    ASSERT_TRUE(ca.ok());
    opts_.upstream_ca_file = dir_ + "/upstream-ca.pem";
    std::ofstream(opts_.upstream_ca_file) << (*ca)->cert_pem();
    auto up = proxy::testing::FakeUpstream::Start(
        *ca, [](const proxy::testing::SeenRequest& r, proxy::testing::ResponseWriter& w) {
          // An in-scope upstream that reflects everything it got: each header back as a header
          // and in the body, the body as it came, and all of it base64-encoded.
          nlohmann::json echo = nlohmann::json::object();
          std::map<std::string, std::string> headers = {{"content-type", "application/json"}};
          for (const auto& [k, v] : r.headers) {
            echo[k] = v;
            if (k != "host" && k != "content-length") headers["x-echo-" + k] = v;
          }
          echo["body"] = r.body;
          std::string all = echo.dump();
          w.Send(200, headers, nlohmann::json{{"echo", echo}, {"b64", vault::Base64Encode(all)}}.dump());
        });
    ASSERT_TRUE(up.ok());
    upstream_ = std::move(up).value();
    for (const char* h : {"api.anthropic.com", "api.openai.com", "api.github.com", "gitlab.com",
                          "api.custom.test", "api.body.test", "sts.amazonaws.com", "chatgpt.com"}) {
      opts_.resolve[std::string(h) + ":443"] = upstream_->Address();
    }
    opts_.resolve_only = true;
    claude_ = std::make_unique<oauth::testing::FakeProvider>(false);
    chatgpt_ = std::make_unique<oauth::testing::FakeProvider>(true);
    WriteVault();
  }
  void TearDown() override {
    if (egress_) egress_->Stop();
    fs::remove_all(dir_);
  }

  void WriteVault() {
    auto v = vault::Vault::Open({opts_.keys_dir, opts_.secrets_file, "ws"}, vault::KeyBackend::kFile);
    ASSERT_TRUE(v.ok()) << v.error().ToString();
    auto put = [&](Result<vault::Credential> c) {
      ASSERT_TRUE(c.ok()) << c.error().ToString();
      v->Put(*c);
    };
    put(vault::MakeCredential(CredentialKind::kAnthropic, kAnthropic, {}, "", false));
    put(vault::MakeCredential(CredentialKind::kOpenai, kOpenai, {}, "", false));
    put(vault::MakeCredential(CredentialKind::kGithub, kGithub, {}, "", false));
    put(vault::MakeCredential(CredentialKind::kGitlab, kGitlab, {}, "", false));
    put(vault::MakeCredential(CredentialKind::kHeader, kHeaderValue, {"api.custom.test"}, "X-Custom-Key",
                              false));
    // The body swap (--body) on its own host: a header kind whose header the request never sends.
    put(vault::MakeCredential(CredentialKind::kHeader, kBodyValue, {"api.body.test"}, "X-Body-Key", true));
    put(vault::MakeAwsCredential(kAwsKeyId, kAwsSecret, kAwsToken, "us-east-1", {}));
    put(oauth::LoginFromClaudeFile(oauth::testing::ClaudeFile(claude_->access(), claude_->refresh()),
                                   "", 1800000000));
    put(oauth::LoginFromCodexFile(
        oauth::testing::CodexFile(chatgpt_->id_token(), chatgpt_->access(), chatgpt_->refresh()),
        1800000000));
    ASSERT_TRUE(v->Save().ok());
  }
  // Sets every credential's ask policy (what `cloister cred policy` writes).
  void SetAsk(vault::ConsentAsk ask) {
    auto v = vault::Vault::Open({opts_.keys_dir, opts_.secrets_file, "ws"}, vault::KeyBackend::kFile);
    ASSERT_TRUE(v.ok());
    std::vector<std::string> ids;
    for (const auto& c : v->credentials()) ids.push_back(c.id);
    for (const auto& id : ids) ASSERT_TRUE(v->SetPolicy(id, ask, {}).ok());
    ASSERT_TRUE(v->Save().ok());
  }
  // (Re)starts the supervisor's egress: the policy is whatever the vault holds now.
  void StartEgress() {
    if (egress_) egress_->Stop();
    egress_.reset();
    auto e = Egress::Start(opts_);
    ASSERT_TRUE(e.ok()) << e.error().ToString();
    egress_ = std::move(e).value();
    ca_file_ = dir_ + "/guest-ca.pem";
    std::ofstream(ca_file_) << egress_->guest().ca_pem;
    auto v = vault::Vault::Open({opts_.keys_dir, opts_.secrets_file, "ws"}, vault::KeyBackend::kFile);
    ASSERT_TRUE(v.ok());
    auto bound = v->Bind();
    ASSERT_TRUE(bound.ok());
    for (const auto& b : *bound) {
      ph_[b.credential.id] = b.placeholder;
      if (!b.aws_token_placeholder.empty()) aws_token_ph_ = b.aws_token_placeholder;
    }
    aws_secret_ph_ = egress_->guest().env.at("AWS_SECRET_ACCESS_KEY");
  }

  // Real curl as the guest: one connection served by the egress proxy.
  CurlOut Curl(const std::string& url, std::vector<std::string> extra) {
    // curl speaks to a TCP proxy: a loopback listener whose one connection goes to Serve.
    int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(bind(lfd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    EXPECT_EQ(listen(lfd, 4), 0);
    socklen_t len = sizeof a;
    getsockname(lfd, reinterpret_cast<sockaddr*>(&a), &len);
    std::thread acceptor([&] {
      int c = accept4(lfd, nullptr, nullptr, SOCK_CLOEXEC);
      if (c >= 0) egress_->Serve(c);
    });
    std::vector<std::string> args = {"-x", "http://127.0.0.1:" + std::to_string(ntohs(a.sin_port)),
                                     "--cacert", ca_file_, "-i"};
    args.insert(args.end(), extra.begin(), extra.end());
    args.push_back(url);
    CurlOut out = proxy::testing::RunCurl(args);
    acceptor.join();
    close(lfd);
    return out;
  }

  // A SigV4 GET to STS signed as the guest signs it: the placeholder secret and token.
  CurlOut AwsRequest() {
    char date[32];
    time_t now = time(nullptr);
    strftime(date, sizeof date, "%Y%m%dT%H%M%SZ", gmtime(&now));
    aws::RequestHead head{"GET", "/?Action=GetCallerIdentity&Version=2011-06-15",
                          {{"Host", "sts.amazonaws.com"}, {"X-Amz-Date", date},
                           {"X-Amz-Security-Token", aws_token_ph_}}};
    aws::SigV4Auth auth;
    auth.access_key_id = kAwsKeyId;
    auth.date = std::string(date, 8);
    auth.region = "us-east-1";
    auth.service = "sts";
    auth.amz_date = date;
    auth.signed_headers = {"host", "x-amz-date", "x-amz-security-token"};
    auto cr = aws::CanonicalRequest(
        head, auth, {aws::UriMode::kDoubleEncode, aws::QueryMode::kReencode, aws::Sha256Hex("")});
    EXPECT_TRUE(cr.ok());
    std::string sig = aws::SignatureHex(
        aws::SigningKey(aws_secret_ph_, auth.date, auth.region, auth.service), aws::StringToSign(auth, *cr));
    std::string authz = "AWS4-HMAC-SHA256 Credential=" + kAwsKeyId + "/" + auth.Scope() +
                        ", SignedHeaders=" + auth.SignedHeadersString() + ", Signature=" + sig;
    return Curl("https://sts.amazonaws.com/?Action=GetCallerIdentity&Version=2011-06-15",
                {"-H", std::string("X-Amz-Date: ") + date, "-H", "X-Amz-Security-Token: " + aws_token_ph_,
                 "-H", "Authorization: " + authz});
  }

  // Every kind's use (and the body swap), keyed by the kind it shows.
  std::map<CredentialKind, Use> Uses() {
    auto header = [&](const std::string& id, const std::string& host, const std::string& path,
                      const std::string& name, const std::string& prefix, const std::string& real) {
      return Use{id, host,
                 [=] { return Curl("https://" + host + path, {"-H", name + ": " + prefix + ph_[id]}); },
                 [=](const proxy::testing::SeenRequest& r) {
                   return r.Header(ToLower(name)) == prefix + real;
                 },
                 {real}};
    };
    std::map<CredentialKind, Use> u;
    u[CredentialKind::kAnthropic] =
        header("anthropic", "api.anthropic.com", "/v1/messages", "x-api-key", "", kAnthropic);
    u[CredentialKind::kOpenai] =
        header("openai", "api.openai.com", "/v1/responses", "Authorization", "Bearer ", kOpenai);
    u[CredentialKind::kGithub] =
        header("github", "api.github.com", "/user", "Authorization", "token ", kGithub);
    u[CredentialKind::kGitlab] =
        header("gitlab", "gitlab.com", "/api/v4/user", "PRIVATE-TOKEN", "", kGitlab);
    u[CredentialKind::kHeader] = header("header:x-custom-key", "api.custom.test", "/",
                                        "X-Custom-Key", "", kHeaderValue);
    u[CredentialKind::kAws] = Use{"aws", "sts.amazonaws.com", [this] { return AwsRequest(); },
                                  [](const proxy::testing::SeenRequest& r) {
                                    return r.Header("x-amz-security-token") == kAwsToken;
                                  },
                                  {kAwsToken}};
    const std::string claude_access = claude_->access(), chatgpt_access = chatgpt_->access();
    u[CredentialKind::kClaudeSubscription] =
        header("claude-subscription", "api.anthropic.com", "/v1/messages", "Authorization",
               "Bearer ", claude_access);
    u[CredentialKind::kChatgptSubscription] =
        header("chatgpt-subscription", "chatgpt.com", "/backend-api/codex/responses",
               "Authorization", "Bearer ", chatgpt_access);
    // A JWT's header and claims are public (the placeholder copies them): its signature is the
    // secret part.
    u[CredentialKind::kChatgptSubscription].reals = {
        std::string(vault::JwtSignature(chatgpt_access))};
    return u;
  }
  Use BodyUse() {
    return Use{"header:x-body-key", "api.body.test",
               [this] {
                 return Curl("https://api.body.test/login",
                             {"-X", "POST", "--data-binary", "secret=" + ph_["header:x-body-key"]});
               },
               [](const proxy::testing::SeenRequest& r) { return r.body == "secret=" + kBodyValue; },
               {kBodyValue}};
  }
  std::vector<proxy::TraceRecord> Trace() {
    auto recs = proxy::ReadTrace(opts_.trace_log);
    return recs.ok() ? *recs : std::vector<proxy::TraceRecord>{};
  }

  std::string dir_, ca_file_, aws_token_ph_, aws_secret_ph_;
  std::map<std::string, std::string> ph_;
  EgressOptions opts_;
  std::unique_ptr<proxy::testing::FakeUpstream> upstream_;
  std::unique_ptr<oauth::testing::FakeProvider> claude_, chatgpt_;
  std::unique_ptr<Egress> egress_;
};

// SECURITY (issue 37 item 1): whatever the kind, a request that would carry a real value asks
// when the policy says so, and is refused when nobody answers.
TEST_F(EgressSwapsTest, EveryCredentialKindAsksBeforeItsRealValueGoesOut) {
  std::map<CredentialKind, Use> uses = Uses();
  for (CredentialKind kind : vault::AllCredentialKinds()) {
    ASSERT_TRUE(uses.count(kind)) << "no use of kind " << vault::KindName(kind)
                                  << " in this test: a new kind needs one here";
  }
  std::vector<Use> all;
  for (auto& [kind, use] : uses) all.push_back(use);
  all.push_back(BodyUse());

  // ask always, nobody to ask (no consent broker): every use refused, nothing upstream.
  ASSERT_NO_FATAL_FAILURE(SetAsk(vault::ConsentAsk::kAlways));
  ASSERT_NO_FATAL_FAILURE(StartEgress());
  for (const Use& use : all) {
    CurlOut out = use.send();
    EXPECT_NE(out.body.find(" 403 "), std::string::npos) << use.credential << ": " << out.body;
    EXPECT_NE(out.body.find("needs the user's consent"), std::string::npos) << use.credential;
  }
  EXPECT_TRUE(upstream_->requests().empty()) << upstream_->requests().size()
                                             << " requests reached the upstream without consent";
  size_t refusals = 0;
  for (const auto& rec : Trace()) {
    for (const auto& c : rec.consent) refusals += c.decision == "refused";
  }
  EXPECT_EQ(refusals, all.size());

  // The same requests with ask off: each one gets its real value (the uses above were real).
  ASSERT_NO_FATAL_FAILURE(SetAsk(vault::ConsentAsk::kOff));
  ASSERT_NO_FATAL_FAILURE(StartEgress());
  for (const Use& use : all) {
    size_t before = upstream_->requests().size();
    CurlOut out = use.send();
    EXPECT_NE(out.body.find(" 200 "), std::string::npos) << use.credential << ": " << out.body;
    auto seen = upstream_->requests();
    ASSERT_EQ(seen.size(), before + 1) << use.credential;
    EXPECT_TRUE(use.got_real(seen.back())) << use.credential << " did not get its real value";
  }
}

// SECURITY (issue 37 item 3): every value any filter swaps in is redacted from what an echoing
// upstream answers (headers, body, base64), and the trace names the swap.
TEST_F(EgressSwapsTest, AnEchoingUpstreamHandsTheGuestNoRealValueOfAnySwap) {
  ASSERT_NO_FATAL_FAILURE(StartEgress());
  std::vector<Use> all;
  for (auto& [kind, use] : Uses()) all.push_back(use);
  all.push_back(BodyUse());
  for (const Use& use : all) {
    CurlOut out = use.send();
    ASSERT_NE(out.body.find(" 200 "), std::string::npos) << use.credential << ": " << out.body;
    ASSERT_TRUE(use.got_real(upstream_->requests().back())) << use.credential;
    for (const std::string& real : use.reals) {
      EXPECT_EQ(out.body.find(real), std::string::npos)
          << use.credential << ": the real value reached the guest";
      EXPECT_EQ(out.body.find(real.substr(8, 24)), std::string::npos)
          << use.credential << ": part of the real value reached the guest";
      std::string b64 = vault::Base64Encode(real);
      EXPECT_EQ(out.body.find(b64.substr(4, b64.size() - 8)), std::string::npos)
          << use.credential << ": the real value reached the guest in base64";
    }
  }
  std::set<std::string> traced;
  for (const auto& rec : Trace()) traced.insert(rec.swaps.begin(), rec.swaps.end());
  for (const Use& use : all) {
    EXPECT_TRUE(traced.count(use.credential)) << use.credential << " swapped but not traced";
  }
}

}  // namespace
}  // namespace cloister::vm
