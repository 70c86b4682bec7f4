// The audit's report: JSON written by `cloister-audit` in the guest and read by the host.
//
// SECURITY: on the host, the JSON comes from the guest and is hostile. ParseAuditReport bounds its
// size and every list, checks every type and range, and checks the byte counts add up; a bad
// document is kCorrupt, never a crash.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "audit/probe.h"
#include "base/result.h"

namespace cloister::audit {

inline constexpr int kReportVersion = 2;  // 2: the sample and give-back fields
inline constexpr size_t kMaxReportBytes = 16 << 20;
inline constexpr size_t kMaxDisks = 8;
inline constexpr size_t kMaxUnresolvedPerDisk = 65536;
inline constexpr size_t kMaxListedRegions = 1024;

struct AuditReport {
  RunId run_id{};
  std::vector<DiskReport> disks;

  bool Clean() const {
    for (const auto& d : disks) {
      if (!d.Clean()) return false;
    }
    return !disks.empty();
  }
};

// Exit codes of `cloister-audit` (and of `cloister audit residue`).
inline constexpr int kAuditClean = 0;
inline constexpr int kAuditFoundForeign = 1;  // or any other unclean result
inline constexpr int kAuditError = 2;

nlohmann::json ReportToJson(const AuditReport& report);
Result<AuditReport> ParseAuditReport(std::string_view text);

// What the host knows of the disks' past, which decides what foreign bytes can mean.
enum class DiskHistory {
  kUnknown,  // the guest binary alone: it cannot know
  kFresh,    // created (or reset / wiped) and not run before this boot: foreign must be 0
  kUsed,     // has run before: foreign bytes can be the workspace's own deleted files
};

// Human-readable report: per disk, the sample and what it can and cannot rule out, the counts,
// what was written and given back, and what foreign means (see docs/design.md "Residue audit").
std::string RenderReport(const AuditReport& report, DiskHistory history);

}  // namespace cloister::audit
