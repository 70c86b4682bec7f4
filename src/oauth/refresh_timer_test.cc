// The refresh timer's policy (when, back-off) and its state machine with a stand-in RefreshFn;
// through the real proxy in oauth_refresh_timer_test.cc.
#include "oauth/refresh_timer.h"

#include <gtest/gtest.h>

#include "oauth/test_util.h"
#include "oauth/wiring.h"

namespace cloister::oauth {
namespace {

using testing::FakeProvider;
using testing::TempVault;

constexpr int64_t kMin = 60 * 1000;

TEST(RefreshPolicyTest, DueAtEightyPercentAtLeastFiveMinutesBeforeExpiryMinusJitter) {
  RefreshPolicy p;
  int64_t t0 = 1'800'000'000'000;
  EXPECT_EQ(RefreshDueAt(t0, t0 + 60 * kMin, 0, p), t0 + 48 * kMin);  // 80% of an hour
  EXPECT_EQ(RefreshDueAt(t0, t0 + 60 * kMin, 30000, p), t0 + 48 * kMin - 30000);
  EXPECT_EQ(RefreshDueAt(t0, t0 + 60 * kMin, 10 * kMin, p), t0 + 47 * kMin);  // jitter <= 1 min
  EXPECT_EQ(RefreshDueAt(t0, t0 + 10 * kMin, 0, p), t0 + 5 * kMin);  // short: 5 min before
  EXPECT_EQ(RefreshDueAt(0, t0, 0, p), t0 - 5 * kMin);               // issue time unknown
  EXPECT_EQ(RefreshDueAt(t0, 0, 0, p), 0);                           // expiry unknown: never
  EXPECT_GT(RefreshDueAt(t0, 1, 0, p), 0);                           // long expired: now
}

TEST(RefreshPolicyTest, BackOffDoublesFromThirtySecondsToFifteenMinutes) {
  RefreshPolicy p;
  EXPECT_EQ(RetryDelay(1, 0, p), 30000);
  EXPECT_EQ(RetryDelay(2, 0, p), 60000);
  EXPECT_EQ(RetryDelay(3, 0, p), 120000);
  EXPECT_EQ(RetryDelay(20, 0, p), 15 * kMin);
  EXPECT_EQ(RetryDelay(1, 5000, p), 35000);
}

TEST(RefreshTimerTest, RefreshesWhenDueBacksOffOnFailureAndRecordsIt) {
  FakeProvider p(false);
  TempVault tv;
  vault::BoundCredential b = tv.Import(p, false);  // refreshed at 1.8e9 s, expires at 1.9e12 ms
  auto login = std::make_shared<LoginCustody>(b, VaultPersister(tv.loc, vault::KeyBackend::kFile));
  std::vector<int> answers = {503, 200};
  int calls = 0;
  RefreshPolicy policy;
  policy.max_jitter_ms = 0;
  RefreshTimer timer({login}, [&](LoginCustody& l) -> Result<int> {
    EXPECT_EQ(&l, login.get());
    if (calls >= static_cast<int>(answers.size())) {
      ++calls;
      return Error(ErrorCode::kUnavailable, "refresh timer: no answer");
    }
    return answers[calls++];
  }, policy, nullptr, 1);
  int64_t due = 1'800'000'000'000 + (1'900'000'000'000 - 1'800'000'000'000) * 8 / 10;
  EXPECT_EQ(timer.RunDue(due - 1), due);  // not yet
  EXPECT_EQ(calls, 0);
  EXPECT_EQ(timer.RunDue(due), due + 30000);  // due: refused (503) -> retry in 30 s
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(timer.failures(0), 1);
  EXPECT_EQ(timer.RunDue(due + 29999), due + 30000);
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(timer.RunDue(due + 30000), due);  // 200: back to the login's own schedule
  EXPECT_EQ(timer.failures(0), 0);
  // No answer at all: recorded in the vault's refresh record (what `cred ls` shows).
  timer.RunDue(due + 30001);
  EXPECT_EQ(timer.failures(0), 1);
  EXPECT_NE(tv.Stored(b.credential.id).oauth.refresh_error.find("no answer"), std::string::npos);
  EXPECT_EQ(timer.RunDue(due + 30002), due + 30001 + 30000);  // retry time, not the schedule
}

TEST(RefreshTimerTest, CaptureSlotWithoutLoginAndUnknownExpiryAreLeftAlone) {
  TempVault tv;
  auto v = vault::Vault::Open(tv.loc, vault::KeyBackend::kFile);
  ASSERT_TRUE(v.ok());
  auto slots = v->BindCaptureSlots();
  ASSERT_TRUE(slots.ok());
  auto slot = std::make_shared<LoginCustody>(slots->front(), nullptr);
  int calls = 0;
  RefreshTimer timer({slot}, [&](LoginCustody&) -> Result<int> { return ++calls, 200; });
  EXPECT_EQ(timer.RunDue(4'000'000'000'000), 0);
  EXPECT_EQ(calls, 0);
}

// The thread refreshes on its own once the clock says the login is due; Stop joins it.
TEST(RefreshTimerTest, TheThreadRefreshesWhenDueAndStopJoinsIt) {
  FakeProvider p(false);
  TempVault tv;
  auto login = std::make_shared<LoginCustody>(tv.Import(p, false), nullptr);
  std::mutex mu;
  std::condition_variable cv;
  int calls = 0;
  RefreshTimer timer({login}, [&](LoginCustody&) -> Result<int> {
    std::lock_guard<std::mutex> l(mu);
    ++calls;
    cv.notify_all();
    return 200;
  }, {}, [] { return int64_t{1'899'999'999'000}; });
  timer.Start();
  {
    std::unique_lock<std::mutex> l(mu);
    cv.wait_for(l, std::chrono::seconds(60), [&] { return calls > 0; });
  }
  timer.Stop();
  timer.Stop();  // idempotent
  std::lock_guard<std::mutex> l(mu);
  EXPECT_GE(calls, 1);
}

}  // namespace
}  // namespace cloister::oauth
