// The real Codex 0.171.0 (npm tarball cache) runs `codex login --device-auth` on the host,
// unmodified, through the real proxy to the fake provider: a login typed in a workspace, with
// the workspace's network replaced by a network namespace of its own (`unshare -n`: loopback
// only) in which socat carries the client's proxy connections to the proxy's unix socket. The
// proxy captures the exchange; Codex writes the placeholders it got into its own auth.json, and
// its own loader (`codex login status`) accepts them.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "base/subprocess.h"
#include "image/npm_tarball.h"
#include "oauth/test_util.h"
#include "oauth/wiring.h"
#include "proxy/test_env.h"
#include "vault/placeholder.h"

namespace cloister::oauth {
namespace {

namespace fs = std::filesystem;
using proxy::testing::ProxyEnv;
using testing::FakeProvider;
using testing::TempVault;

class CodexLoginTest : public ::testing::Test {
 protected:
  void SetUp() override {
    provider = std::make_unique<FakeProvider>(true);
    provider->set_strict_pkce(true);
    provider->set_auto_approve(true);  // the user approved the code in the host's browser
    auto up = proxy::testing::FakeUpstream::Start(env.upstream_ca, provider->handler());
    ASSERT_TRUE(up.ok());
    upstream = std::move(up).value();
    auto v = vault::Vault::Open(tv.loc, vault::KeyBackend::kFile);
    ASSERT_TRUE(v.ok());
    auto slots = v->BindCaptureSlots();
    ASSERT_TRUE(slots.ok());
    for (const auto& s : *slots) {
      if (s.credential.kind == vault::CredentialKind::kChatgptSubscription) slot = s;
    }
    proxy::ProxyConfig cfg;
    cfg.credentials = env.creds;
    auto f = AddOauthFilters(cfg, VaultPersister(tv.loc, vault::KeyBackend::kFile),
                             std::move(slots).value(),
                             VaultPersister(tv.loc, vault::KeyBackend::kFile, "", true));
    ASSERT_TRUE(f.ok()) << f.error().ToString();
    env.creds = cfg.credentials;
    env.extension_filters = cfg.extension_filters;
    env.StartProxy({{"auth.openai.com:443", upstream->Address()},
                    {"chatgpt.com:443", upstream->Address()}});
    // The proxy's unix socket (as the supervisor hands it channel streams).
    sock_path = env.dir + "/proxy.sock";
    listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    snprintf(a.sun_path, sizeof a.sun_path, "%s", sock_path.c_str());
    ASSERT_EQ(bind(listen_fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    ASSERT_EQ(listen(listen_fd, 16), 0);
    acceptor = std::thread([this] {
      for (;;) {
        int fd = accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
        if (fd < 0) return;
        env.proxy->Serve(fd);
      }
    });
  }
  void TearDown() override {
    shutdown(listen_fd, SHUT_RDWR);
    close(listen_fd);
    if (acceptor.joinable()) acceptor.join();
  }

  std::string Extract(const std::string& tgz, const std::string& member) {
    std::string path = image::NpmCacheDir() + "/" + tgz;
    EXPECT_TRUE(fs::exists(path)) << path << " missing (scripts/install-deps.sh test caches it)";
    RunOptions o;
    o.timeout = std::chrono::minutes(5);
    auto r = RunProcess({"tar", "xzf", path, "-C", env.dir, member}, o);
    EXPECT_TRUE(r.ok() && r->exit_code == 0) << (r.ok() ? r->err : r.error().ToString());
    return env.dir + "/" + member;
  }

  // `argv` in a new network namespace (loopback only) with the client's proxy settings.
  RunOutput InNamespace(const std::string& home, const std::vector<std::string>& argv) {
    // socat lives only as long as the client (killed by pid on the way out).
    std::string cmd = "ip link set lo up || exit 1; socat TCP-LISTEN:18443,bind=127.0.0.1,fork,"
                      "reuseaddr UNIX-CONNECT:" + sock_path + " </dev/null >/dev/null 2>&1 & "
                      "S=$!; sleep 0.5; \"$@\"; r=$?; kill $S; exit $r";
    std::vector<std::string> full = {"unshare", "-n", "sh", "-c", cmd, "sh"};
    full.insert(full.end(), argv.begin(), argv.end());
    RunOptions o;
    o.env_set = {{"HOME", home}, {"CODEX_HOME", home + "/.codex"},
                 {"HTTPS_PROXY", "http://127.0.0.1:18443"}, {"HTTP_PROXY", "http://127.0.0.1:18443"},
                 {"https_proxy", "http://127.0.0.1:18443"}, {"CODEX_CA_CERTIFICATE", env.ca_file},
                 {"SSL_CERT_FILE", env.ca_file}};
    o.env_unset = {"OPENAI_API_KEY", "NO_PROXY", "no_proxy", "CODEX_REFRESH_TOKEN_URL_OVERRIDE"};
    o.timeout = std::chrono::minutes(3);
    auto r = RunProcess(full, o);
    EXPECT_TRUE(r.ok()) << r.error().ToString();
    return r.ok() ? *r : RunOutput{};
  }

  ProxyEnv env;
  TempVault tv;
  std::unique_ptr<FakeProvider> provider;
  std::unique_ptr<proxy::testing::FakeUpstream> upstream;
  vault::BoundCredential slot;
  std::string sock_path;
  int listen_fd = -1;
  std::thread acceptor;
};

TEST_F(CodexLoginTest, DeviceCodeLoginIsCapturedAndCodexKeepsOnlyPlaceholders) {
  std::string codex = Extract("openai-codex-0.171.0-linux-x64.tgz",
                              "package/vendor/x86_64-unknown-linux-musl/bin/codex");
  std::string home = env.dir + "/home";
  fs::create_directories(home + "/.codex");
  RunOutput login = InNamespace(home, {codex, "login", "--device-auth"});
  std::string said = login.out + login.err;
  EXPECT_EQ(login.exit_code, 0) << said;
  EXPECT_EQ(provider->logins(), 1) << said;

  // Codex's own file: the captured login's placeholders, never a real token.
  std::ifstream in(home + "/.codex/auth.json");
  std::string file((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_FALSE(file.empty()) << said;
  for (const std::string& t : provider->issued()) {
    EXPECT_EQ(file.find(t), std::string::npos) << "a real token in the client's file";
    EXPECT_EQ(said.find(t), std::string::npos);
    std::string_view sig = vault::JwtSignature(t);
    if (!sig.empty()) EXPECT_EQ(file.find(sig), std::string::npos);
  }
  auto j = nlohmann::json::parse(file, nullptr, false);
  ASSERT_TRUE(j.is_object()) << file;
  EXPECT_EQ(j["tokens"]["refresh_token"], slot.refresh_placeholder);
  EXPECT_EQ(vault::JwtSignature(j["tokens"]["access_token"].get<std::string>()),
            vault::JwtSignature(slot.placeholder));
  EXPECT_EQ(vault::JwtSignature(j["tokens"]["id_token"].get<std::string>()),
            vault::JwtSignature(slot.id_token_placeholder));
  // The vault holds the real login, captured for this workspace.
  vault::Credential stored = tv.Stored(slot.credential.id);
  EXPECT_EQ(stored.value, provider->access());
  EXPECT_EQ(stored.oauth.refresh_token, provider->refresh());
  EXPECT_EQ(stored.oauth.source, "capture");
  // Codex's own loader accepts what it wrote.
  RunOutput status = InNamespace(home, {codex, "login", "status"});
  EXPECT_NE((status.out + status.err).find("Logged in using ChatGPT"), std::string::npos)
      << status.out << status.err;
}

}  // namespace
}  // namespace cloister::oauth
