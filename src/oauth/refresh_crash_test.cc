// Fault injection through the store's Env (store/fault_injection_env.h) into the vault saves of a
// refresh: a crash ("SIGKILL before step n") at every step of both saves (the refresh record
// before the token leaves, the rotated login after the provider's answer). After each crash the
// vault opens (never torn), and either the login it holds is still live at the provider or the
// refresh record says a refresh was interrupted: what a crash loses is always stated.
#include <gtest/gtest.h>

#include "oauth/custody.h"
#include "oauth/test_util.h"
#include "oauth/wiring.h"
#include "store/fault_injection_env.h"

namespace cloister::oauth {
namespace {

using testing::FakeProvider;
using testing::TempVault;

std::string RefreshBody(const std::string& refresh) {
  return R"({"grant_type":"refresh_token","refresh_token":")" + refresh + R"("})";
}

class RefreshCrashTest : public ::testing::TestWithParam<bool> {};  // param: jwt (ChatGPT)

TEST_P(RefreshCrashTest, CrashAtEveryStepOfTheRefreshSavesLosesNoLoginSilently) {
  bool jwt = GetParam();
  int crashes = 0, lost = 0, live = 0;
  for (int64_t step = 0;; ++step) {
    SCOPED_TRACE("crash before step " + std::to_string(step));
    FakeProvider p(jwt);
    TempVault tv;
    vault::BoundCredential b = tv.Import(p, jwt);
    FaultInjectionEnv env(Env::Default());
    env.CrashAtStep(step);
    {
      LoginCustody c(b, VaultPersister(tv.loc, vault::KeyBackend::kFile, "", false, &env));
      auto real = c.BeginRefresh();
      if (real.ok()) {
        auto [status, answer] = p.Exchange(RefreshBody(*real));
        ASSERT_EQ(status, 200) << answer;
        (void)c.CompleteRefresh(answer);
      } else {
        EXPECT_EQ(p.refreshes(), 0) << "the token left although its record was not saved";
      }
    }  // the process "dies" here: nothing in memory survives
    if (!env.crashed()) {
      // Past the last step: the whole refresh ran; every step before was tried.
      EXPECT_GE(step, 8) << "two atomic saves are at least 8 steps";
      EXPECT_EQ(tv.Stored(b.credential.id).oauth.refresh_token, p.refresh());
      EXPECT_EQ(tv.Stored(b.credential.id).oauth.refresh_started_at, 0);
      break;
    }
    ++crashes;
    // Never torn: the vault opens with the default Env and holds the login.
    auto v = vault::Vault::Open(tv.loc, vault::KeyBackend::kFile);
    ASSERT_TRUE(v.ok()) << v.error().ToString();
    const vault::Credential* stored = v->Find(b.credential.id);
    ASSERT_NE(stored, nullptr);
    bool alive = stored->oauth.refresh_token == p.refresh() && !p.revoked();
    if (alive) {
      ++live;
      // The next boot's custody refreshes with it: the login was not lost.
      auto bound = v->Bind();
      ASSERT_TRUE(bound.ok());
      LoginCustody next(bound->front(), VaultPersister(tv.loc, vault::KeyBackend::kFile));
      auto real = next.BeginRefresh();
      ASSERT_TRUE(real.ok());
      auto [status, answer] = p.Exchange(RefreshBody(*real));
      EXPECT_EQ(status, 200) << answer;
      EXPECT_TRUE(next.CompleteRefresh(answer).ok());
    } else {
      ++lost;
      // The provider retired the stored token: the vault must say a refresh was interrupted
      // (`cred ls`), with the time it was sent.
      EXPECT_NE(stored->oauth.refresh_started_at, 0)
          << "the login is lost and nothing says so";
    }
  }
  EXPECT_GT(crashes, 0);
  EXPECT_GT(lost, 0);  // a crash after the provider's answer does lose the login ...
  EXPECT_GT(live, 0);  // ... and one before the token left does not
}

INSTANTIATE_TEST_SUITE_P(Providers, RefreshCrashTest, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "chatgpt" : "claude"; });

}  // namespace
}  // namespace cloister::oauth
