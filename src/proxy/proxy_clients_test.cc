// Real clients through the proxy: git clone + push over HTTPS to git http-backend behind a local
// TLS server, `gh api user` against a fake API, and `curl -N` reading server-sent events
// incrementally. Real host names (github.com, api.github.com, api.anthropic.com) are mapped to the
// local fakes by the proxy's resolve override; nothing leaves 127.0.0.1. Label: integration.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <thread>

#include "base/strings.h"
#include "base/subprocess.h"
#include "base/testing_file.h"
#include "proxy/test_env.h"
#include "vault/crypto.h"
#include "vault/guest_files.h"

namespace cloister::proxy::testing {
namespace {

using testfile::Slurp;

// The environment a guest tool runs with: our CA, our proxy, no user config.
RunOptions GuestEnv(ProxyEnv& env, const std::string& home) {
  RunOptions o;
  o.env_unset = {"http_proxy", "https_proxy", "ALL_PROXY", "all_proxy", "NO_PROXY", "no_proxy",
                 "GH_TOKEN", "GITHUB_TOKEN", "GH_HOST", "CURL_CA_BUNDLE"};
  o.env_set = {{"HOME", home},
               {"HTTPS_PROXY", env.ProxyUrl()},
               {"HTTP_PROXY", env.ProxyUrl()},
               {"SSL_CERT_FILE", env.ca_file},
               {"GIT_SSL_CAINFO", env.ca_file},
               {"GIT_CONFIG_NOSYSTEM", "1"},
               {"GIT_TERMINAL_PROMPT", "0"},
               {"XDG_CONFIG_HOME", home + "/.config"}};
  o.timeout = std::chrono::seconds(120);
  return o;
}

class ClientsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/cloister-clients-XXXXXX";
    home_ = mkdtemp(tmpl);
  }
  void TearDown() override { std::filesystem::remove_all(home_); }
  std::string home_;
  ProxyEnv env_;
};

TEST_F(ClientsTest, GitCloneAndPushOverHttps) {
  if (!ProgramExists("git")) GTEST_SKIP() << "git not installed";
  std::string srv = home_ + "/srv";
  std::string seed = home_ + "/seed";
  std::filesystem::create_directories(srv + "/o");
  RunOptions plain;
  plain.env_set = {{"HOME", home_}, {"GIT_CONFIG_NOSYSTEM", "1"}};
  auto git = [&](const std::string& cwd, std::vector<std::string> args, RunOptions o) {
    std::vector<std::string> argv = {"git", "-c", "user.name=t", "-c", "user.email=t@t",
                                     "-c", "init.defaultBranch=main"};
    argv.insert(argv.end(), args.begin(), args.end());
    o.cwd = cwd;
    return RunProcess(argv, o);
  };
  ASSERT_TRUE(git(home_, {"init", "-q", seed}, plain)->success());
  std::ofstream(seed + "/README") << "hello\n";
  ASSERT_TRUE(git(seed, {"add", "README"}, plain)->success());
  ASSERT_TRUE(git(seed, {"commit", "-qm", "first"}, plain)->success());
  ASSERT_TRUE(git(home_, {"clone", "-q", "--bare", seed, srv + "/o/r.git"}, plain)->success());
  ASSERT_TRUE(git(srv + "/o/r.git", {"config", "http.receivepack", "true"}, plain)->success());

  const std::string real_basic = "Basic " + vault::Base64Encode("x-access-token:" + kRealGithub);
  auto up = FakeUpstream::Start(env_.upstream_ca, GitHttpBackend(srv, real_basic));
  ASSERT_TRUE(up.ok());
  env_.StartProxy({{"github.com:443", (*up)->Address()}});

  // The guest's credential file, exactly as the VM gets it.
  auto files = vault::BuildGuestCredentials(env_.creds);
  std::string cred_file;
  for (const auto& f : files.files) {
    if (f.path == ".git-credentials") cred_file = WriteTempFile(home_, "git-credentials", f.content);
  }
  ASSERT_FALSE(cred_file.empty());
  RunOptions guest = GuestEnv(env_, home_);
  std::vector<std::string> cfg = {"-c", "credential.helper=store --file=" + cred_file};
  auto with = [&](std::vector<std::string> a) {
    a.insert(a.begin(), cfg.begin(), cfg.end());
    return a;
  };
  auto clone = git(home_, with({"clone", "https://github.com/o/r.git", home_ + "/work"}), guest);
  ASSERT_TRUE(clone.ok());
  ASSERT_TRUE(clone->success()) << clone->err;
  EXPECT_EQ(Slurp(home_ + "/work/README"), "hello\n");

  std::ofstream(home_ + "/work/CHANGE") << "pushed through the proxy\n";
  ASSERT_TRUE(git(home_ + "/work", {"add", "CHANGE"}, plain)->success());
  ASSERT_TRUE(git(home_ + "/work", {"commit", "-qm", "second"}, plain)->success());
  auto push = git(home_ + "/work", with({"push", "origin", "main"}), guest);
  ASSERT_TRUE(push.ok());
  ASSERT_TRUE(push->success()) << push->err;
  auto head = git(srv + "/o/r.git", {"log", "-1", "--format=%s", "main"}, plain);
  EXPECT_EQ(Trim(head->out), "second");

  // The upstream saw the real token; the guest side only ever had the placeholder.
  bool saw_real = false;
  for (const auto& r : (*up)->requests()) saw_real |= r.Header("authorization") == real_basic;
  EXPECT_TRUE(saw_real);
  EXPECT_EQ(Slurp(cred_file).find(kRealGithub), std::string::npos);
  EXPECT_EQ(clone->err.find(kRealGithub), std::string::npos);
  EXPECT_EQ(push->err.find(kRealGithub), std::string::npos);
  EXPECT_FALSE(env_.proxy->compromised());
  auto trace = env_.TraceAtLeast(4);
  int swaps = 0;
  for (const auto& t : trace) swaps += !t.swaps.empty();
  EXPECT_GE(swaps, 2);  // at least the authenticated fetch and push
}

TEST_F(ClientsTest, GhApiUser) {
  if (!ProgramExists("gh")) GTEST_SKIP() << "gh not installed";
  auto up = FakeUpstream::Start(env_.upstream_ca, [](const SeenRequest& r, ResponseWriter& w) {
    if (r.target == "/user" && r.Header("authorization") == "token " + kRealGithub) {
      w.Send(200, {{"Content-Type", "application/json; charset=utf-8"}},
             "{\"login\":\"octocat\",\"id\":1}");
    } else {
      w.Send(401, {{"Content-Type", "application/json"}},
             "{\"message\":\"Bad credentials\"}");
    }
  });
  ASSERT_TRUE(up.ok());
  env_.StartProxy({{"api.github.com:443", (*up)->Address()}});
  auto guest_files = vault::BuildGuestCredentials(env_.creds);
  RunOptions o = GuestEnv(env_, home_);
  o.env_set["GH_TOKEN"] = guest_files.env.at("GH_TOKEN");
  o.env_set["GH_CONFIG_DIR"] = home_ + "/gh";
  o.env_set["GH_NO_UPDATE_NOTIFIER"] = "1";
  o.env_set["GH_PROMPT_DISABLED"] = "1";
  auto out = RunProcess({"gh", "api", "user"}, o);
  ASSERT_TRUE(out.ok());
  ASSERT_TRUE(out->success()) << out->err << out->out;
  auto doc = nlohmann::json::parse(out->out, nullptr, false);
  ASSERT_FALSE(doc.is_discarded()) << out->out;
  EXPECT_EQ(doc["login"], "octocat");
  ASSERT_FALSE((*up)->requests().empty());
  EXPECT_EQ((*up)->requests().back().Header("authorization"), "token " + kRealGithub);
  EXPECT_EQ(out->out.find(kRealGithub), std::string::npos);
}

TEST_F(ClientsTest, CurlReadsServerSentEventsIncrementally) {
  Gate release;
  auto up = FakeUpstream::Start(env_.upstream_ca, [&](const SeenRequest& r, ResponseWriter& w) {
    w.StartChunked(200, {{"Content-Type", "text/event-stream"}, {"Cache-Control", "no-cache"}});
    w.Chunk("event: message_start\ndata: {\"type\":\"message_start\"}\n\n");
    // The stream stays open until the test has seen the first event on the client side.
    release.Wait(std::chrono::seconds(30));
    w.Chunk("event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n");
    w.End();
  });
  ASSERT_TRUE(up.ok());
  env_.StartProxy({{"api.anthropic.com:443", (*up)->Address()}});
  std::string out_file = home_ + "/sse.out";
  RunOptions o = GuestEnv(env_, home_);
  Result<RunOutput> result = Error(ErrorCode::kInternal, "not run");
  std::thread client([&] {
    result = RunProcess({"curl", "-sS", "-N", "-o", out_file, "--max-time", "60", "-x",
                         env_.ProxyUrl(), "--cacert", env_.ca_file, "-H",
                         "x-api-key: " + env_.Placeholder(0), "-d", "{\"stream\":true}",
                         "https://api.anthropic.com/v1/messages"},
                        o);
  });
  // Wait (bounded) for the first event to reach curl's output while the stream is still open.
  bool first_seen = false;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  std::string partial;
  while (std::chrono::steady_clock::now() < deadline) {
    partial = Slurp(out_file);
    if (partial.find("message_start") != std::string::npos) {
      first_seen = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  bool second_before_release = partial.find("message_stop") != std::string::npos;
  release.Open();
  client.join();
  EXPECT_TRUE(first_seen) << "the first event did not arrive before the stream ended";
  EXPECT_FALSE(second_before_release);
  ASSERT_TRUE(result.ok());
  EXPECT_TRUE(result->success()) << result->err;
  std::string full = Slurp(out_file);
  EXPECT_NE(full.find("message_stop"), std::string::npos);
  ASSERT_EQ((*up)->requests().size(), 1u);
  EXPECT_EQ((*up)->requests()[0].Header("x-api-key"), kRealAnthropic);
}

}  // namespace
}  // namespace cloister::proxy::testing
