#include "store/retention.h"

#include <gtest/gtest.h>

#include <map>
#include <set>

namespace cloister {
namespace {

constexpr int64_t kDay = 86400;
// 2026-11-30 12:00 UTC, a Monday.
constexpr int64_t kNow = 1796040000;

TEST(RetentionTest, KeepsLastThreeWhateverTheirAge) {
  std::vector<int64_t> t = {kNow - 400 * kDay, kNow - 300 * kDay, kNow - 200 * kDay,
                            kNow - 100 * kDay};
  std::vector<bool> keep = SelectRetained(t, kNow);
  EXPECT_EQ(keep, (std::vector<bool>{false, true, true, true}));
}

TEST(RetentionTest, SimulatedTwoMonthsOfBoots) {
  // Four boots a day for 60 days, each followed by retention, as the VM module will do.
  std::vector<int64_t> kept;
  int64_t now = kNow - 60 * kDay;
  for (int day = 0; day < 60; ++day) {
    for (int boot = 0; boot < 4; ++boot) {
      now += 6 * 3600;
      kept.push_back(now);
      std::vector<bool> keep = SelectRetained(kept, now);
      std::vector<int64_t> next;
      for (size_t i = 0; i < kept.size(); ++i) {
        if (keep[i]) next.push_back(kept[i]);
      }
      kept = next;
    }
  }
  // Bounded: 3 + 7 daily + 5 weekly at most.
  EXPECT_LE(kept.size(), 15u);
  // The newest 3 are kept.
  std::sort(kept.rbegin(), kept.rend());
  EXPECT_EQ(kept[0], now);
  EXPECT_EQ(kept[1], now - 6 * 3600);
  EXPECT_EQ(kept[2], now - 12 * 3600);
  // Exactly one per calendar day for each of the last 7 days (beyond the newest 3).
  std::map<int64_t, int> per_day;
  std::set<int64_t> weeks;
  for (int64_t t : kept) {
    if (now - t < 7 * kDay) per_day[t / kDay]++;
    EXPECT_LT(now - t, 31 * kDay) << "nothing older than a month survives";
    weeks.insert((t / kDay + 3) / 7);
  }
  for (int64_t d = now / kDay - 5; d < now / kDay; ++d) EXPECT_EQ(per_day[d], 1) << d;
  // At least one per week for the last 4 weeks.
  for (int64_t w = (now / kDay + 3) / 7 - 3; w <= (now / kDay + 3) / 7; ++w) {
    EXPECT_TRUE(weeks.count(w)) << "week " << w;
  }
}

TEST(RetentionTest, NewestOfEachDayWins) {
  std::vector<int64_t> t = {kNow - 3 * kDay + 100, kNow - 3 * kDay + 200, kNow - 3 * kDay + 300,
                            kNow - 10, kNow - 20, kNow - 30};
  // Day -3 keeps only its newest (the daily rule), not the two older ones of that day.
  std::vector<bool> keep = SelectRetained(t, kNow);
  int day3 = 0;
  for (size_t i = 0; i < 3; ++i) day3 += keep[i];
  EXPECT_EQ(day3, 1);
  EXPECT_TRUE(keep[2]);
}

TEST(RetentionTest, FutureTimesAreAgeZeroAndEmptyIsFine) {
  EXPECT_TRUE(SelectRetained({}, kNow).empty());
  std::vector<bool> keep = SelectRetained({kNow + 1000}, kNow);
  EXPECT_TRUE(keep[0]);
}

}  // namespace
}  // namespace cloister
