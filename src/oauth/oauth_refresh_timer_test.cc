// The host-side refresh timer through the real proxy: ProxyRefresher connects to the proxy on
// loopback, CONNECTs to the token host, POSTs the refresh placeholder; the proxy swaps in the real
// refresh token, the fake provider rotates, the custody saves the new login and traces it.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "oauth/refresh_timer.h"
#include "oauth/proxy_rig.h"

namespace cloister::oauth {
namespace {


class OauthRefreshTimerTest : public ::testing::TestWithParam<bool>,  // param: jwt
                              public testing::OauthProxyRig {
 protected:
  void SetUp() override {
    bool jwt = GetParam();
    ASSERT_NO_FATAL_FAILURE(StartProvider(jwt));
    login = tv.Import(*provider, jwt);
    ASSERT_NO_FATAL_FAILURE(
        StartProxy({jwt ? "auth.openai.com" : "platform.claude.com"}, {login}));
  }

  RefreshTimer::RefreshFn Refresher() {
    uint16_t port = env.proxy_port;
    return ProxyRefresher(
        [port]() -> Result<int> {
          int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
          sockaddr_in a{};
          a.sin_family = AF_INET;
          a.sin_port = htons(port);
          a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
          if (fd < 0 || connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
            if (fd >= 0) close(fd);
            return Error(ErrorCode::kIo, "connect to the proxy");
          }
          return fd;
        },
        env.ca->cert_pem());
  }

  vault::BoundCredential login;
};

TEST_P(OauthRefreshTimerTest, RefreshesThroughTheProxyBeforeExpiryAndRecordsFailures) {
  ASSERT_EQ(filter->logins().size(), 1u);
  std::shared_ptr<LoginCustody> custody = filter->logins()[0];
  RefreshPolicy policy;
  policy.max_jitter_ms = 0;
  RefreshTimer timer(filter->logins(), Refresher(), policy, nullptr, 1);
  int64_t due = RefreshDueAt(custody->last_refresh_ms(), custody->expires_at_ms(), 0, policy);
  ASSERT_GT(due, 0);
  timer.RunDue(due - 1);
  EXPECT_EQ(provider->refreshes(), 0);

  std::string before = provider->refresh();
  int64_t next = timer.RunDue(due);
  EXPECT_EQ(provider->refreshes(), 1);
  EXPECT_EQ(timer.failures(0), 0);
  EXPECT_NE(provider->refresh(), before);
  // Saved (the rotated login is the vault's), and the next refresh follows the new expiry.
  vault::Credential stored = tv.Stored(login.credential.id);
  EXPECT_EQ(stored.oauth.refresh_token, provider->refresh());
  EXPECT_EQ(stored.value, provider->access());
  EXPECT_TRUE(stored.oauth.refresh_error.empty());
  EXPECT_EQ(next, RefreshDueAt(custody->last_refresh_ms(), custody->expires_at_ms(), 0, policy));
  EXPECT_NE(next, due);
  // Traced like any refresh (id only).
  auto recs = env.TraceAtLeast(2);
  int refreshes = 0;
  for (const auto& rec : recs) {
    for (const auto& s : rec.swaps) refreshes += s == "oauth-refresh:" + login.credential.id;
    for (const std::string& t : provider->issued()) {
      EXPECT_EQ(rec.ToJson().dump().find(t), std::string::npos);
    }
  }
  EXPECT_EQ(refreshes, 1);

  // The provider kills the login (a reused token revokes it): the timer's refresh is refused,
  // the failure is in the vault's refresh record (`cred ls`), and it backs off.
  (void)provider->Exchange(R"({"grant_type":"refresh_token","refresh_token":"retired"})");
  ASSERT_TRUE(provider->revoked());
  int64_t retry = timer.RunDue(4'000'000'000'000);
  EXPECT_EQ(timer.failures(0), 1);
  EXPECT_EQ(retry, 4'000'000'000'000 + 30000);
  EXPECT_NE(tv.Stored(login.credential.id).oauth.refresh_error.find("HTTP 400"), std::string::npos);
  EXPECT_EQ(tv.Stored(login.credential.id).oauth.refresh_token, provider->refresh());
  EXPECT_TRUE(env.Events().empty());
}

INSTANTIATE_TEST_SUITE_P(Providers, OauthRefreshTimerTest, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "chatgpt" : "claude"; });

}  // namespace
}  // namespace cloister::oauth
