#include "store/retention.h"

#include <algorithm>
#include <map>
#include <numeric>

namespace cloister {
namespace {

int64_t FloorDiv(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }

}  // namespace

std::vector<bool> SelectRetained(const std::vector<int64_t>& created, int64_t now) {
  std::vector<size_t> order(created.size());
  std::iota(order.begin(), order.end(), 0);
  // Newest first; ties broken by index so the result is deterministic.
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return created[a] > created[b]; });
  std::vector<bool> keep(created.size(), false);
  std::map<int64_t, bool> day_seen, week_seen;
  for (size_t rank = 0; rank < order.size(); ++rank) {
    size_t i = order[rank];
    int64_t age = std::max<int64_t>(0, now - created[i]);
    int64_t day = FloorDiv(created[i], 86400);
    int64_t week = FloorDiv(day + 3, 7);  // 1970-01-01 was a Thursday: +3 makes weeks start Monday
    if (rank < static_cast<size_t>(kRetainLast)) keep[i] = true;
    if (age < kRetainDailyFor && !day_seen[day]) keep[i] = true;
    if (age < kRetainWeeklyFor && !week_seen[week]) keep[i] = true;
    day_seen[day] = true;
    week_seen[week] = true;
  }
  return keep;
}

}  // namespace cloister
