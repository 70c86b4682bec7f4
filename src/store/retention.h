// Tiered retention of automatic (proven-boot) checkpoints: keep the newest 3; then, for checkpoints
// younger than 7 days, the newest of each UTC calendar day; then, for those younger than 30 days,
// the newest of each week (weeks start on Monday, UTC). Everything else is pruned. A pure function
// of the creation times and `now`, so it is tested with an injected clock.
#pragma once

#include <cstdint>
#include <vector>

namespace cloister {

inline constexpr int kRetainLast = 3;
inline constexpr int64_t kRetainDailyFor = 7 * 86400;
inline constexpr int64_t kRetainWeeklyFor = 30 * 86400;

// `created` in any order (unix seconds); returns keep[i] for each. Times in the future count as
// age 0.
std::vector<bool> SelectRetained(const std::vector<int64_t>& created, int64_t now);

}  // namespace cloister
