// The supervisor's wire boundary on the host: the guest setup holds placeholders only, and a real
// curl through Egress::Serve reaches a local fake of api.anthropic.com with the real key swapped
// in (resolve override, test CA; nothing leaves 127.0.0.1).
#include "supervisor/egress.h"

#include <netinet/in.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <mutex>
#include <filesystem>
#include <fstream>
#include <thread>

#include <gtest/gtest.h>

#include "base/subprocess.h"
#include "proxy/ca.h"
#include "proxy/fake_upstream.h"
#include "proxy/trace.h"
#include "vault/credential.h"
#include "vault/vault.h"

namespace cloister::vm {
namespace {

namespace fs = std::filesystem;
const std::string kReal =
    "sk-ant-api03-REALxKEYxNEVERxINxTHExGUESTx0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWX-_AA";

// The guest's listener in miniature: its one accepted connection goes to Serve, as the mux's
// "proxy" service does with each guest stream. Join() once the client is done.
class OneGuestConnection {
 public:
  explicit OneGuestConnection(Egress& egress) {
    lfd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(bind(lfd_, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    EXPECT_EQ(listen(lfd_, 8), 0);
    socklen_t len = sizeof a;
    getsockname(lfd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    acceptor_ = std::thread([this, &egress] {
      int c = accept4(lfd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (c >= 0) egress.Serve(c);
    });
  }
  ~OneGuestConnection() { Join(); }
  // The proxy URL the guest's client uses.
  std::string ProxyUrl() const { return "http://127.0.0.1:" + std::to_string(port_); }
  void Join() {
    if (acceptor_.joinable()) acceptor_.join();
    if (lfd_ >= 0) close(lfd_);
    lfd_ = -1;
  }

 private:
  int lfd_ = -1;
  uint16_t port_ = 0;
  std::thread acceptor_;
};

class EgressTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/cloister-egress-XXXXXX";
    dir_ = mkdtemp(tmpl);
    fs::create_directories(dir_ + "/keys");
    fs::permissions(dir_ + "/keys", fs::perms::owner_all);
    opts_.workspace = "ws";
    opts_.keys_dir = dir_ + "/keys";
    opts_.secrets_file = dir_ + "/secrets.enc";
    opts_.trace_log = dir_ + "/trace.jsonl";
    opts_.key_backend = vault::KeyBackend::kFile;
  }
  void TearDown() override { fs::remove_all(dir_); }

  void AddAnthropicKey() {
    auto v = vault::Vault::Open({opts_.keys_dir, opts_.secrets_file, "ws"}, vault::KeyBackend::kFile);
    ASSERT_TRUE(v.ok()) << v.error().ToString();
    auto c = vault::MakeCredential(vault::CredentialKind::kAnthropic, kReal, {}, "", false);
    ASSERT_TRUE(c.ok());
    v->Put(*c);
    ASSERT_TRUE(v->Save().ok());
  }

  std::string dir_;
  EgressOptions opts_;
};

std::string Everything(const GuestSetup& g) {
  std::string all = g.ca_pem;
  for (auto& [k, v] : g.env) all += k + "=" + v + "\n";
  for (auto& f : g.files) all += f.path + "\n" + f.content + "\n";
  return all;
}

TEST(EgressOverridesTest, ParsesResolveAndRefusesMalformedEntries) {
  EgressOptions o;
  setenv("CLOISTER_PROXY_RESOLVE", "api.anthropic.com:443=127.0.0.1:4443, api.github.com:443=127.0.0.1:5443", 1);
  setenv("CLOISTER_PROXY_UPSTREAM_CA", "/tmp/ca.pem", 1);
  ASSERT_TRUE(EgressOverridesFromEnv(o).ok());
  EXPECT_EQ(o.resolve.at("api.anthropic.com:443"), "127.0.0.1:4443");
  EXPECT_EQ(o.resolve.at("api.github.com:443"), "127.0.0.1:5443");
  EXPECT_TRUE(o.resolve_only);
  EXPECT_EQ(o.upstream_ca_file, "/tmp/ca.pem");
  for (const char* bad : {"api.anthropic.com=127.0.0.1:1", "=1.2.3.4:5", "a:1=", "a:1-b:2"}) {
    EgressOptions b;
    setenv("CLOISTER_PROXY_RESOLVE", bad, 1);
    EXPECT_FALSE(EgressOverridesFromEnv(b).ok()) << bad;
  }
  unsetenv("CLOISTER_PROXY_RESOLVE");
  unsetenv("CLOISTER_PROXY_UPSTREAM_CA");
  EgressOptions none;
  ASSERT_TRUE(EgressOverridesFromEnv(none).ok());
  EXPECT_TRUE(none.resolve.empty());
  EXPECT_FALSE(none.resolve_only);
}

TEST(ToolEnvironmentTest, ClaudeNeitherUpdatesItselfNorPhonesHomeAndTheRegistryOverrideIsChecked) {
  auto claude = ToolEnvironment("claude");
  EXPECT_EQ(claude.at("DISABLE_AUTOUPDATER"), "1");
  EXPECT_EQ(claude.at("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"), "1");
  EXPECT_TRUE(ToolEnvironment("shell").empty());
  unsetenv("CLOISTER_GUEST_NPM_REGISTRY");
  auto none = GuestNpmRegistryFromEnv();
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());  // npm's own default
  setenv("CLOISTER_GUEST_NPM_REGISTRY", "https://registry.npm.test", 1);
  auto set = GuestNpmRegistryFromEnv();
  ASSERT_TRUE(set.ok());
  EXPECT_EQ(set->at("npm_config_registry"), "https://registry.npm.test/");
  for (const char* bad : {"http://registry.npm.test/", "https://", "https://a b/", "ftp://x/"}) {
    setenv("CLOISTER_GUEST_NPM_REGISTRY", bad, 1);
    EXPECT_FALSE(GuestNpmRegistryFromEnv().ok()) << bad;
  }
  unsetenv("CLOISTER_GUEST_NPM_REGISTRY");
}

TEST_F(EgressTest, WithoutCredentialsTheGuestStillGetsTheProxyAndTheCa) {
  auto e = Egress::Start(opts_);
  ASSERT_TRUE(e.ok()) << e.error().ToString();
  const GuestSetup& g = (*e)->guest();
  EXPECT_EQ(g.env.at("HTTPS_PROXY"), kGuestProxyUrl);
  EXPECT_EQ(g.env.at("SSL_CERT_FILE"), kGuestCaBundle);
  EXPECT_EQ(g.env.count("ANTHROPIC_API_KEY"), 0u);
  EXPECT_EQ(g.ca_pem.rfind("-----BEGIN CERTIFICATE-----", 0), 0u);
  // The CA is the store's per-install CA, the same on every boot.
  std::ifstream f(opts_.keys_dir + "/proxy-ca.crt");
  std::stringstream ss;
  ss << f.rdbuf();
  EXPECT_EQ(ss.str(), g.ca_pem);
}

// Without any login the workspace's proxy still knows the placeholders a login typed in the
// guest will get (oauth capture slots, wired here): one sent to another host trips the detector.
TEST_F(EgressTest, WithoutALoginTheCaptureSlotPlaceholdersTripTheDetector) {
  auto upstream_ca = proxy::CertAuthority::CreateInMemory("test upstream CA");
  ASSERT_TRUE(upstream_ca.ok());
  std::string upstream_ca_file = dir_ + "/upstream-ca.pem";
  std::ofstream(upstream_ca_file) << (*upstream_ca)->cert_pem();
  auto fake = proxy::testing::FakeUpstream::Start(
      *upstream_ca, [](const proxy::testing::SeenRequest&, proxy::testing::ResponseWriter& w) {
        w.Send(200, {{"content-type", "application/json"}}, "{\"ok\":true}");
      });
  ASSERT_TRUE(fake.ok());
  opts_.resolve = {{"elsewhere.example:443", (*fake)->Address()}};
  opts_.resolve_only = true;
  opts_.upstream_ca_file = upstream_ca_file;
  std::mutex mu;
  std::vector<proxy::CompromiseEvent> events;
  opts_.on_compromise = [&](const proxy::CompromiseEvent& ev) {
    std::lock_guard<std::mutex> l(mu);
    events.push_back(ev);
  };
  auto e = Egress::Start(opts_);
  ASSERT_TRUE(e.ok()) << e.error().ToString();
  std::string slot_placeholder;
  {
    auto v = vault::Vault::Open({opts_.keys_dir, opts_.secrets_file, "ws"}, vault::KeyBackend::kFile);
    ASSERT_TRUE(v.ok());
    auto slots = v->BindCaptureSlots();
    ASSERT_TRUE(slots.ok());
    ASSERT_FALSE(slots->empty());
    slot_placeholder = slots->front().placeholder;  // claude-subscription's access placeholder
  }
  OneGuestConnection guest(**e);
  std::string ca_file = dir_ + "/guest-ca.pem";
  std::ofstream(ca_file) << (*e)->guest().ca_pem;
  auto run = RunProcess({"curl", "-sS", "--max-time", "60", "--cacert", ca_file, "-x",
                         guest.ProxyUrl(), "-o",
                         "/dev/null", "-w", "%{http_code}", "-H",
                         "Authorization: Bearer " + slot_placeholder,
                         "https://elsewhere.example/x"});
  guest.Join();
  ASSERT_TRUE(run.ok()) << run.error().ToString();
  EXPECT_EQ(run->out, "451") << run->err;
  std::lock_guard<std::mutex> l(mu);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].credential, "claude-subscription");
  EXPECT_TRUE((*fake)->requests().empty());
}

TEST_F(EgressTest, GuestGetsOnlyThePlaceholderAndTheUpstreamGetsTheRealKey) {
  AddAnthropicKey();
  auto upstream_ca = proxy::CertAuthority::CreateInMemory("test upstream CA");
  ASSERT_TRUE(upstream_ca.ok());
  std::string upstream_ca_file = dir_ + "/upstream-ca.pem";
  std::ofstream(upstream_ca_file) << (*upstream_ca)->cert_pem();
  auto fake = proxy::testing::FakeUpstream::Start(
      *upstream_ca, [](const proxy::testing::SeenRequest&, proxy::testing::ResponseWriter& w) {
        w.Send(200, {{"content-type", "application/json"}}, "{\"ok\":true}");
      });
  ASSERT_TRUE(fake.ok());
  opts_.resolve = {{"api.anthropic.com:443", (*fake)->Address()}};
  opts_.resolve_only = true;
  opts_.upstream_ca_file = upstream_ca_file;
  auto e = Egress::Start(opts_);
  ASSERT_TRUE(e.ok()) << e.error().ToString();
  const GuestSetup& g = (*e)->guest();
  ASSERT_EQ(g.env.count("ANTHROPIC_API_KEY"), 1u);
  const std::string placeholder = g.env.at("ANTHROPIC_API_KEY");
  EXPECT_NE(placeholder, kReal);
  EXPECT_EQ(Everything(g).find(kReal), std::string::npos) << "a real value reached the guest setup";
  EXPECT_EQ(Everything(g).find(kReal.substr(20, 40)), std::string::npos);

  OneGuestConnection guest(**e);
  std::string ca_file = dir_ + "/guest-ca.pem";
  std::ofstream(ca_file) << g.ca_pem;
  auto run = RunProcess({"curl", "-sS", "--max-time", "60", "--cacert", ca_file, "-x",
                         guest.ProxyUrl(), "-H",
                         "x-api-key: " + placeholder, "https://api.anthropic.com/v1/messages"});
  guest.Join();
  ASSERT_TRUE(run.ok()) << run.error().ToString();
  EXPECT_EQ(run->exit_code, 0) << run->err;
  EXPECT_EQ(run->out, "{\"ok\":true}");
  auto seen = (*fake)->requests();
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].sni, "api.anthropic.com");
  EXPECT_EQ(seen[0].Header("x-api-key"), kReal);
  EXPECT_FALSE((*e)->compromised());
  (*e)->Stop();
}

// AWS and ssh wiring: the guest gets the real key id with placeholders for the secret and token,
// the ssh drop-in and CONNECT helper; the proxy has AddAwsFilters' token entry (its placeholder
// toward a host outside the AWS scope trips the detector).
TEST_F(EgressTest, AwsPlaceholdersAndSshFilesReachTheGuestAndTheTokenPlaceholderIsWatched) {
  const std::string secret = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYREALSECRET";
  const std::string token = "IQoJb3JpZ2luX2VjEREALsessionTOKEN0123456789abcdef";
  {
    auto v = vault::Vault::Open({opts_.keys_dir, opts_.secrets_file, "ws"}, vault::KeyBackend::kFile);
    ASSERT_TRUE(v.ok());
    auto c = vault::MakeAwsCredential("ASIACLOISTEREGRESS01", secret, token, "eu-west-1", {});
    ASSERT_TRUE(c.ok());
    v->Put(*c);
    ASSERT_TRUE(v->Save().ok());
  }
  auto fake = proxy::testing::FakeUpstream::Start(
      nullptr, [](const proxy::testing::SeenRequest&, proxy::testing::ResponseWriter& w) {
        w.Send(200, {{"content-type", "text/plain"}}, "ok");
      });
  ASSERT_TRUE(fake.ok());
  opts_.resolve = {{"elsewhere.example.test:80", (*fake)->Address()}};
  opts_.resolve_only = true;
  auto e = Egress::Start(opts_);
  ASSERT_TRUE(e.ok()) << e.error().ToString();
  const GuestSetup& g = (*e)->guest();
  EXPECT_EQ(g.env.at("AWS_ACCESS_KEY_ID"), "ASIACLOISTEREGRESS01");
  EXPECT_EQ(g.env.at("AWS_REGION"), "eu-west-1");
  const std::string token_ph = g.env.at("AWS_SESSION_TOKEN");
  EXPECT_EQ(token_ph.size(), token.size());
  EXPECT_NE(token_ph, token);
  EXPECT_EQ(g.env.at("SSH_AUTH_SOCK"), kGuestAgentSocket);
  std::string all = Everything(g);
  EXPECT_EQ(all.find(secret), std::string::npos);
  EXPECT_EQ(all.find(token), std::string::npos);
  EXPECT_EQ(all.find("REAL"), std::string::npos);
  bool config = false;
  for (const auto& f : g.files) {
    if (f.path == "/etc/ssh/ssh_config.d/cloister.conf") {
      // The CONNECT client is the guest agent itself (guest/ssh_connect.h).
      config = f.content.find("ProxyCommand /run/cloister/meta/cloister-agent ssh-connect %h %p") !=
                   std::string::npos &&
               f.content.find("IdentityAgent /run/cloister/ssh-agent.sock") != std::string::npos;
    }
  }
  EXPECT_TRUE(config);

  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  (*e)->Serve(sv[0]);
  std::string req = "GET http://elsewhere.example.test/x HTTP/1.1\r\nHost: elsewhere.example.test\r\n"
                    "X-Amz-Security-Token: " + token_ph + "\r\nConnection: close\r\n\r\n";
  ASSERT_EQ(write(sv[1], req.data(), req.size()), static_cast<ssize_t>(req.size()));
  std::string got;
  char buf[4096];
  ssize_t n;
  while ((n = read(sv[1], buf, sizeof buf)) > 0) got.append(buf, n);
  close(sv[1]);
  EXPECT_EQ(got.substr(0, 12), "HTTP/1.1 451") << got;
  EXPECT_TRUE((*e)->compromised());
  EXPECT_TRUE((*fake)->requests().empty());
  (*e)->Stop();
}

// The per-workspace switch (`cloister cred policy NAME --llm-body flag|block`, kept in the vault)
// reaches the supervisor's proxy: a placeholder in the body of a request to an LLM provider is
// forwarded and flagged under `flag`, refused and tripped under `block`.
TEST_F(EgressTest, LlmBodyPolicyFromTheVaultIsWhatTheProxyApplies) {
  for (vault::LlmBodyPolicy policy : {vault::LlmBodyPolicy::kFlag, vault::LlmBodyPolicy::kBlock}) {
    SCOPED_TRACE(vault::LlmBodyPolicyName(policy));
    fs::remove(opts_.secrets_file);
    fs::remove(opts_.trace_log);
    {
      auto v = vault::Vault::Open({opts_.keys_dir, opts_.secrets_file, "ws"}, vault::KeyBackend::kFile);
      ASSERT_TRUE(v.ok());
      auto a = vault::MakeCredential(vault::CredentialKind::kAnthropic, kReal, {}, "", false);
      auto gh = vault::MakeCredential(vault::CredentialKind::kGithub,
                                      "ghp_REALGITHUBSECRET0123456789abcdefgh", {}, "", false);
      ASSERT_TRUE(a.ok() && gh.ok());
      v->Put(*a);
      v->Put(*gh);
      v->set_llm_body_policy(policy);
      ASSERT_TRUE(v->Save().ok());
    }
    auto fake = proxy::testing::FakeUpstream::Start(
        nullptr, [](const proxy::testing::SeenRequest&, proxy::testing::ResponseWriter& w) {
          w.Send(200, {{"content-type", "text/plain"}}, "ok");
        });
    ASSERT_TRUE(fake.ok());
    EgressOptions o = opts_;
    o.resolve = {{"api.anthropic.com:80", (*fake)->Address()}};
    o.resolve_only = true;
    std::vector<proxy::CompromiseEvent> events;
    std::mutex mu;
    o.on_compromise = [&](const proxy::CompromiseEvent& ev) {
      std::lock_guard<std::mutex> l(mu);
      events.push_back(ev);
    };
    auto e = Egress::Start(o);
    ASSERT_TRUE(e.ok()) << e.error().ToString();
    const std::string gh_ph = (*e)->guest().env.at("GH_TOKEN");
    std::string body = "{\"messages\":[{\"content\":\"cat ~/.git-credentials: " + gh_ph + "\"}]}";
    int sv[2];
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    (*e)->Serve(sv[0]);
    std::string req = "POST http://api.anthropic.com/v1/messages HTTP/1.1\r\nHost: api.anthropic.com\r\n"
                      "Content-Length: " + std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body;
    ASSERT_EQ(write(sv[1], req.data(), req.size()), static_cast<ssize_t>(req.size()));
    std::string got;
    char buf[4096];
    ssize_t n;
    while ((n = read(sv[1], buf, sizeof buf)) > 0) got.append(buf, n);
    close(sv[1]);
    (*e)->Stop();
    auto trace = proxy::ReadTrace(opts_.trace_log);
    ASSERT_TRUE(trace.ok());
    ASSERT_EQ(trace->size(), 1u);
    ASSERT_EQ((*trace)[0].leaks.size(), 1u);
    EXPECT_EQ((*trace)[0].leaks[0].credential, "github");
    if (policy == vault::LlmBodyPolicy::kFlag) {
      EXPECT_EQ(got.substr(0, 12), "HTTP/1.1 200") << got;
      ASSERT_EQ((*fake)->requests().size(), 1u);
      EXPECT_EQ((*fake)->requests()[0].body, body);
      EXPECT_EQ((*trace)[0].leaks[0].action, "flagged");
      EXPECT_TRUE(events.empty());
    } else {
      EXPECT_EQ(got.substr(0, 12), "HTTP/1.1 451") << got;
      EXPECT_TRUE((*fake)->requests().empty());
      EXPECT_EQ((*trace)[0].leaks[0].action, "blocked");
      ASSERT_EQ(events.size(), 1u);
      EXPECT_EQ(events[0].credential, "github");
      EXPECT_EQ(events[0].host, "api.anthropic.com");
    }
  }
}

}  // namespace
}  // namespace cloister::vm
