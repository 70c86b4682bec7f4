// awscli v2 (Debian's awscli) through the real egress proxy with the AWS filter (label:
// integration). The production wiring end to end, with only the network faked:
//
//   vault: `MakeAwsCredential` + Put + Save, Open + Bind (real placeholders for secret and token)
//   guest: awscli with BuildGuestCredentials()'s env (real key id, placeholder secret and token),
//          HTTPS_PROXY = the proxy, AWS_CA_BUNDLE = the proxy's CA
//     -> proxy (AddAwsFilters): CONNECT, TLS interception, re-signing with the real secret
//     -> resolve override: sts./s3.eu-west-1.amazonaws.com:443 -> a local HTTPS upstream (test CA,
//        certificate per name by SNI; src/aws/testdata/sigv4_tool.py serve) that verifies SigV4
//        with the REAL secret and token using botocore's signer (an independent implementation),
//        implements STS GetCallerIdentity and a small S3, mints credentials (STS GetSessionToken,
//        AssumeRole; ECR GetAuthorizationToken and its registry), and flags any request carrying
//        a placeholder.
#include <gtest/gtest.h>
#include <signal.h>

#include <filesystem>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>

#include "aws/proxy_filter.h"
#include "base/strings.h"
#include "base/subprocess.h"
#include "proxy/ca.h"
#include "proxy/proxy.h"
#include "proxy/trace.h"
#include "vault/guest_files.h"
#include "vault/vault.h"

namespace cloister::aws {
namespace {

namespace fs = std::filesystem;

const char* kPython = "/usr/bin/python3";
const char* kAws = "/usr/bin/aws";
const char* kCurl = "/usr/bin/curl";
const char* kKeyId = "ASIACLOISTERPROXY001";
const char* kRealSecret = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYREAL111KEY";
const char* kRealToken = "IQoJb3JpZ2luX2VjEREALsessionTOKEN1111111111abcdefghijklmnop+/==";
const std::vector<std::string> kHosts = {"sts.eu-west-1.amazonaws.com", "s3.eu-west-1.amazonaws.com",
                                         "elsewhere.example.test", "api.ecr.eu-west-1.amazonaws.com",
                                         "123456789012.dkr.ecr.eu-west-1.amazonaws.com"};

std::string Tool() {
  const char* src = std::getenv("CLOISTER_SOURCE_DIR");
  return std::string(src ? src : ".") + "/src/aws/testdata/sigv4_tool.py";
}

std::string ReadFile(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

class AwsThroughProxyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!ProgramExists(kAws)) GTEST_SKIP() << "awscli not installed (scripts/install-deps.sh test)";
    auto probe = RunProcess({kPython, "-c", "import botocore"});
    if (!probe.ok() || !probe->success()) GTEST_SKIP() << "python3-botocore not installed";
    char tmpl[] = "/tmp/cloister-awsproxy-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    fs::create_directories(dir_ / "ws");

    // The vault, as `cloister cred add ws aws` leaves it, then as the supervisor binds it.
    vault::VaultLocation loc{(dir_ / "keys").string(), (dir_ / "ws" / "secrets.enc").string(), "ws"};
    {
      auto v = vault::Vault::Open(loc, vault::KeyBackend::kFile);
      ASSERT_TRUE(v.ok()) << v.error().ToString();
      auto c = vault::MakeAwsCredential(kKeyId, kRealSecret, kRealToken, "eu-west-1", {});
      ASSERT_TRUE(c.ok()) << c.error().ToString();
      v->Put(*c);
      ASSERT_TRUE(v->Save().ok());
    }
    auto v = vault::Vault::Open(loc, vault::KeyBackend::kFile);
    ASSERT_TRUE(v.ok());
    auto bound = v->Bind();
    ASSERT_TRUE(bound.ok());
    guest_env_ = vault::BuildGuestCredentials(*bound).env;
    placeholder_secret_ = (*bound)[0].placeholder;
    placeholder_token_ = (*bound)[0].aws_token_placeholder;
    ASSERT_EQ(guest_env_["AWS_SECRET_ACCESS_KEY"], placeholder_secret_);
    ASSERT_EQ(guest_env_["AWS_SESSION_TOKEN"], placeholder_token_);

    // Upstream: one certificate per host name from a test CA, chosen by SNI.
    auto upstream_ca = proxy::CertAuthority::CreateInMemory("test upstream CA");
    ASSERT_TRUE(upstream_ca.ok());
    fs::create_directories(dir_ / "certs");
    for (const std::string& h : kHosts) {
      auto pem = (*upstream_ca)->LeafPem(h);
      ASSERT_TRUE(pem.ok());
      std::ofstream(dir_ / "certs" / (h + ".pem")) << *pem;
    }
    std::ofstream(dir_ / "certs" / "key.pem") << (*upstream_ca)->LeafKeyPem();
    std::ofstream(dir_ / "upstream-ca.pem") << (*upstream_ca)->cert_pem();
    std::ofstream(dir_ / "real.json") << nlohmann::json{{"access_key_id", kKeyId},
                                                        {"secret", kRealSecret},
                                                        {"token", kRealToken},
                                                        {"forbidden", {placeholder_secret_, placeholder_token_}}}
                                             .dump();
    auto up = RunProcess({kPython, Tool(), "serve", (dir_ / "real.json").string(), (dir_ / "log").string(),
                          (dir_ / "port").string(), (dir_ / "pid").string(), (dir_ / "certs").string()},
                         RunOptions{.timeout = std::chrono::seconds(30)});
    ASSERT_TRUE(up.ok() && up->success()) << (up.ok() ? up->err : up.error().ToString());
    upstream_pid_ = std::stoi(ReadFile(dir_ / "pid"));
    std::string upstream = "127.0.0.1:" + ReadFile(dir_ / "port");

    auto ca = proxy::CertAuthority::CreateInMemory("test proxy CA");
    ASSERT_TRUE(ca.ok());
    std::ofstream(dir_ / "proxy-ca.pem") << (*ca)->cert_pem();
    proxy::ProxyConfig cfg;
    cfg.workspace = "ws";
    cfg.credentials = *bound;
    cfg.ca = *ca;
    for (const std::string& h : kHosts) cfg.resolve[h + ":443"] = upstream;
    cfg.resolve_only = true;
    cfg.upstream_ca_file = (dir_ / "upstream-ca.pem").string();
    cfg.on_compromise = [this](const proxy::CompromiseEvent& e) {
      std::lock_guard<std::mutex> l(mu_);
      events_.push_back(e);
    };
    auto trace = proxy::TraceSink::Open((dir_ / "trace.jsonl").string());
    ASSERT_TRUE(trace.ok());
    cfg.trace = *trace;
    auto wired = AddAwsFilters(cfg);
    ASSERT_TRUE(wired.ok()) << wired.error().ToString();
    ASSERT_EQ(*wired, 1);
    auto p = proxy::Proxy::Start(std::move(cfg));
    ASSERT_TRUE(p.ok()) << p.error().ToString();
    proxy_ = std::move(p).value();
    auto port = proxy_->ListenLoopback();
    ASSERT_TRUE(port.ok());
    proxy_port_ = *port;
    std::ofstream(dir_ / "config") << "[default]\ns3 =\n  addressing_style = path\n";
  }
  void TearDown() override {
    if (proxy_) proxy_->Stop();
    if (upstream_pid_ > 0) kill(upstream_pid_, SIGTERM);
    std::error_code ec;
    if (!dir_.empty()) fs::remove_all(dir_, ec);
  }

  std::string ProxyUrl() const { return "http://127.0.0.1:" + std::to_string(proxy_port_); }

  // awscli as the guest runs it: exactly the env the guest gets, plus the proxy settings.
  RunOutput Aws(std::vector<std::string> args, std::map<std::string, std::string> override_env = {}) {
    std::vector<std::string> argv = {kAws};
    argv.insert(argv.end(), args.begin(), args.end());
    RunOptions opts;
    opts.timeout = std::chrono::seconds(240);
    opts.env_set = guest_env_;
    for (const auto& [k, v] : std::map<std::string, std::string>{
             {"AWS_CONFIG_FILE", (dir_ / "config").string()},
             {"AWS_SHARED_CREDENTIALS_FILE", (dir_ / "none").string()},
             {"AWS_CA_BUNDLE", (dir_ / "proxy-ca.pem").string()},
             {"HTTPS_PROXY", ProxyUrl()},
             {"AWS_EC2_METADATA_DISABLED", "true"},
             {"AWS_PAGER", ""},
             {"HOME", dir_.string()}}) {
      opts.env_set[k] = v;
    }
    for (const auto& [k, v] : override_env) opts.env_set[k] = v;
    opts.env_unset = {"NO_PROXY", "no_proxy", "https_proxy", "AWS_PROFILE"};
    auto out = RunProcess(argv, opts);
    EXPECT_TRUE(out.ok()) << out.error().ToString();
    return out.ok() ? *out : RunOutput{};
  }

  std::vector<nlohmann::json> Log() {
    std::vector<nlohmann::json> entries;
    for (const std::string& line : Split(ReadFile(dir_ / "log"), '\n')) {
      auto j = nlohmann::json::parse(line, nullptr, false);
      if (!line.empty() && !j.is_discarded()) entries.push_back(j);
    }
    return entries;
  }

  fs::path dir_;
  std::map<std::string, std::string> guest_env_;
  std::string placeholder_secret_, placeholder_token_;
  pid_t upstream_pid_ = -1;
  std::unique_ptr<proxy::Proxy> proxy_;
  uint16_t proxy_port_ = 0;
  std::mutex mu_;
  std::vector<proxy::CompromiseEvent> events_;
};

TEST_F(AwsThroughProxyTest, StsS3MultipartPresignedAndStreamingUpload) {
  RunOutput id = Aws({"sts", "get-caller-identity", "--output", "json"});
  ASSERT_EQ(id.exit_code, 0) << id.err;
  EXPECT_NE(id.out.find("123456789012"), std::string::npos) << id.out;

  // 20 MiB: awscli splits it into a multipart upload (8 MiB parts).
  std::string data(20 << 20, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>((i * 2654435761u) >> 11);
  std::ofstream(dir_ / "big.bin", std::ios::binary) << data;
  RunOutput up = Aws({"s3", "cp", "--no-progress", (dir_ / "big.bin").string(), "s3://cloister-bucket/big.bin"});
  ASSERT_EQ(up.exit_code, 0) << up.err;
  RunOutput down = Aws({"s3", "cp", "--no-progress", "s3://cloister-bucket/big.bin", (dir_ / "back.bin").string()});
  ASSERT_EQ(down.exit_code, 0) << down.err;
  EXPECT_TRUE(ReadFile(dir_ / "back.bin") == data);

  // A presigned URL made by awscli with the placeholder, fetched through the proxy by curl: the
  // query-string signature is re-signed.
  RunOutput url = Aws({"s3", "presign", "s3://cloister-bucket/big.bin", "--expires-in", "600"});
  ASSERT_EQ(url.exit_code, 0) << url.err;
  std::string presigned = Trim(url.out);
  ASSERT_NE(presigned.find("X-Amz-Signature="), std::string::npos) << presigned;
  auto fetched = RunProcess({kCurl, "-sS", "-o", (dir_ / "presigned.bin").string(), "-w", "%{http_code}",
                             "--proxy", ProxyUrl(), "--cacert", (dir_ / "proxy-ca.pem").string(), presigned},
                            RunOptions{.env_unset = {"NO_PROXY", "no_proxy"}, .timeout = std::chrono::seconds(120)});
  ASSERT_TRUE(fetched.ok());
  EXPECT_EQ(fetched->out, "200") << fetched->err;
  EXPECT_TRUE(ReadFile(dir_ / "presigned.bin") == data);

  // An aws-chunked STREAMING-AWS4-HMAC-SHA256-PAYLOAD upload (botocore signs the head; the tool
  // signs 11 chunks of 64 KiB with the placeholder), through the proxy.
  RunOptions opts;
  opts.stdin_data = nlohmann::json{{"access_key_id", kKeyId}, {"secret", placeholder_secret_},
                                   {"token", placeholder_token_}}.dump();
  opts.timeout = std::chrono::seconds(60);
  opts.env_unset = {"NO_PROXY", "no_proxy"};
  auto streamed = RunProcess({kPython, Tool(), "put-streaming", "s3.eu-west-1.amazonaws.com",
                              "cloister-bucket/streamed.bin", "700000",
                              "127.0.0.1:" + std::to_string(proxy_port_), (dir_ / "proxy-ca.pem").string()},
                             opts);
  ASSERT_TRUE(streamed.ok() && streamed->success()) << (streamed.ok() ? streamed->err : "");
  EXPECT_EQ(streamed->out.substr(0, 3), "200") << streamed->out;

  // Every request reached the upstream signed with the real secret and token, and none carried a
  // placeholder.
  int part_puts = 0, streams = 0, presigned_gets = 0;
  auto log = Log();
  for (const auto& e : log) {
    EXPECT_TRUE(e["ok"].get<bool>()) << e.dump();
    EXPECT_EQ(e["leaked"].get<int>(), 0) << e.dump();
    if (e["method"] == "PUT" && e["query"].get<std::string>().find("uploadId=") != std::string::npos) part_puts++;
    if (e["streaming"].get<bool>()) streams++;
    if (e["presigned"].get<bool>()) presigned_gets++;
  }
  EXPECT_EQ(part_puts, 3);  // 8 + 8 + 4 MiB
  EXPECT_EQ(streams, 1);
  EXPECT_EQ(presigned_gets, 1);
  EXPECT_TRUE(events_.empty());
}

TEST_F(AwsThroughProxyTest, WrongSecretIsRefusedAndPlaceholderElsewhereTrips) {
  // The guest signing with anything but the placeholder (here: even the real secret) gets 403
  // from the proxy; nothing reaches the upstream.
  RunOutput wrong = Aws({"sts", "get-caller-identity"}, {{"AWS_SECRET_ACCESS_KEY", kRealSecret}});
  EXPECT_NE(wrong.exit_code, 0);
  EXPECT_NE(wrong.err.find("AWS re-signing refused"), std::string::npos) << wrong.err;
  RunOutput other = Aws({"s3", "ls", "s3://cloister-bucket/"},
                        {{"AWS_SECRET_ACCESS_KEY", "SomeOtherSecretKeyThatIsNotThePlaceholder"}});
  EXPECT_NE(other.exit_code, 0);
  EXPECT_TRUE(Log().empty());

  // The session token's placeholder sent to a host outside the AWS scope trips the detector.
  auto sent = RunProcess({kCurl, "-sS", "-o", "/dev/null", "-w", "%{http_code}", "--proxy", ProxyUrl(),
                          "--cacert", (dir_ / "proxy-ca.pem").string(), "-H",
                          "X-Amz-Security-Token: " + placeholder_token_, "https://elsewhere.example.test/"},
                         RunOptions{.env_unset = {"NO_PROXY", "no_proxy"}, .timeout = std::chrono::seconds(60)});
  ASSERT_TRUE(sent.ok());
  EXPECT_EQ(sent->out, "451");
  std::lock_guard<std::mutex> l(mu_);
  ASSERT_EQ(events_.size(), 1u);
  EXPECT_EQ(events_[0].credential, kSessionTokenId);
  EXPECT_TRUE(Log().empty());
}

// Issue 15 item 1: credentials AWS mints for the guest stay on the host. awscli asks the fake STS
// for a session token; the guest's copy is placeholders (no byte of the minted secret, token or
// key id in anything awscli got); calls signed with those placeholders reach AWS re-signed with
// the minted secret (the fake verifies with botocore), also chained (assume-role with minted
// credentials); the ECR password works for the registry only through the proxy; the trace names
// each minted credential.
TEST_F(AwsThroughProxyTest, MintedCredentialsStayOnTheHost) {
  auto minted = [&] {
    std::vector<nlohmann::json> out;
    for (const std::string& line : Split(ReadFile(dir_ / "log.minted"), '\n')) {
      if (!line.empty()) out.push_back(nlohmann::json::parse(line));
    }
    return out;
  };
  auto expect_none_of = [&](const std::string& where, const std::string& text) {
    for (const auto& m : minted()) {
      for (const char* f : {"secret", "token", "access_key_id", "password"}) {
        if (!m.contains(f)) continue;
        std::string v = m[f];
        EXPECT_EQ(text.find(v), std::string::npos) << where << " holds the minted " << f;
        // Not even a 12-character piece of it.
        for (size_t i = 0; i + 12 <= v.size(); i += 6) {
          ASSERT_EQ(text.find(v.substr(i, 12)), std::string::npos) << where << " holds part of the minted " << f;
        }
      }
    }
  };
  std::ofstream forbidden(dir_ / "log.forbidden", std::ios::app);

  RunOutput st = Aws({"sts", "get-session-token", "--output", "json"});
  ASSERT_EQ(st.exit_code, 0) << st.err;
  ASSERT_EQ(minted().size(), 1u);
  expect_none_of("get-session-token's output", st.out + st.err);
  auto creds = nlohmann::json::parse(st.out)["Credentials"];
  std::string id = creds["AccessKeyId"], secret = creds["SecretAccessKey"], token = creds["SessionToken"];
  EXPECT_EQ(id.substr(0, 4), "ASIA");
  EXPECT_EQ(id.size(), 20u);
  EXPECT_EQ(secret.size(), 40u);
  EXPECT_NE(id, minted()[0]["access_key_id"].get<std::string>());
  forbidden << secret << "\n" << token << "\n" << std::flush;

  // A call signed by the guest with its copies: re-signed on the host with the minted secret.
  std::map<std::string, std::string> as_minted = {
      {"AWS_ACCESS_KEY_ID", id}, {"AWS_SECRET_ACCESS_KEY", secret}, {"AWS_SESSION_TOKEN", token}};
  RunOutput who = Aws({"sts", "get-caller-identity", "--output", "json"}, as_minted);
  ASSERT_EQ(who.exit_code, 0) << who.err;
  auto log = Log();
  ASSERT_FALSE(log.empty());
  EXPECT_TRUE(log.back()["ok"].get<bool>()) << log.back().dump();
  EXPECT_EQ(log.back()["akid"], minted()[0]["access_key_id"]) << log.back().dump();
  EXPECT_EQ(log.back()["leaked"], 0);

  // Chained: assume-role with the minted credentials mints again, into custody again.
  RunOutput role = Aws({"sts", "assume-role", "--role-arn", "arn:aws:iam::123456789012:role/dev",
                        "--role-session-name", "cloister-session", "--output", "json"}, as_minted);
  ASSERT_EQ(role.exit_code, 0) << role.err;
  ASSERT_EQ(minted().size(), 2u);
  expect_none_of("assume-role's output", role.out + role.err);
  auto rc = nlohmann::json::parse(role.out)["Credentials"];
  std::map<std::string, std::string> as_role = {{"AWS_ACCESS_KEY_ID", rc["AccessKeyId"]},
                                                {"AWS_SECRET_ACCESS_KEY", rc["SecretAccessKey"]},
                                                {"AWS_SESSION_TOKEN", rc["SessionToken"]}};
  forbidden << as_role["AWS_SECRET_ACCESS_KEY"] << "\n" << as_role["AWS_SESSION_TOKEN"] << "\n" << std::flush;
  ASSERT_EQ(Aws({"sts", "get-caller-identity"}, as_role).exit_code, 0);
  EXPECT_EQ(Log().back()["akid"], minted()[1]["access_key_id"]);

  // The placeholders with another secret: refused by the proxy, nothing reaches AWS.
  size_t before = Log().size();
  auto wrong = as_minted;
  wrong["AWS_SECRET_ACCESS_KEY"] = "NotThePlaceholderSecretNotThePlaceholder";
  EXPECT_NE(Aws({"sts", "get-caller-identity"}, wrong).exit_code, 0);
  EXPECT_EQ(Log().size(), before);

  // ECR: the password the guest gets is a placeholder; the registry gets the real one.
  RunOutput pw = Aws({"ecr", "get-login-password", "--region", "eu-west-1"});
  ASSERT_EQ(pw.exit_code, 0) << pw.err;
  ASSERT_EQ(minted().size(), 3u);
  expect_none_of("get-login-password's output", pw.out + pw.err);
  std::string guest_pw = Trim(pw.out);
  EXPECT_EQ(guest_pw.size(), minted()[2]["password"].get<std::string>().size());
  auto pull = RunProcess({kCurl, "-sS", "-o", "/dev/null", "-w", "%{http_code}", "--proxy", ProxyUrl(),
                          "--cacert", (dir_ / "proxy-ca.pem").string(), "-u", "AWS:" + guest_pw,
                          "https://123456789012.dkr.ecr.eu-west-1.amazonaws.com/v2/"},
                         RunOptions{.env_unset = {"NO_PROXY", "no_proxy"}, .timeout = std::chrono::seconds(60)});
  ASSERT_TRUE(pull.ok());
  EXPECT_EQ(pull->out, "200") << pull->err;

  // The trace names each minted credential by its placeholder, never by a real value.
  std::string swaps;
  auto records = proxy::ReadTrace((dir_ / "trace.jsonl").string());
  ASSERT_TRUE(records.ok());
  for (const auto& rec : *records) {
    for (const auto& s : rec.swaps) swaps += s + "\n";
  }
  EXPECT_NE(swaps.find("aws-custody:sts:GetSessionToken " + id), std::string::npos) << swaps;
  EXPECT_NE(swaps.find("aws-custody:sts:AssumeRole"), std::string::npos) << swaps;
  EXPECT_NE(swaps.find("aws-custody:ecr:GetAuthorizationToken"), std::string::npos) << swaps;
  expect_none_of("the trace", ReadFile(dir_ / "trace.jsonl"));
  EXPECT_TRUE(events_.empty());
}

}  // namespace
}  // namespace cloister::aws
