// Host side of `cloister audit residue`: what to run in the guest, and how to settle its answer.
//
// SECURITY: everything in GuestRun comes from the guest. The report is parsed by
// ParseAuditReport (bounded, hostile-input parser); stderr is only ever shown truncated and
// stripped to printable ASCII.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "audit/probe.h"
#include "audit/report.h"
#include "base/result.h"

namespace cloister::audit {

// Where the metadata disk puts the static audit binary in the guest (mounted by the boot hook).
inline constexpr char kGuestAuditPath[] = "/run/cloister/meta/cloister-audit";
// Name of the binary on the metadata disk and in the build tree.
inline constexpr char kAuditBinaryName[] = "cloister-audit";

// How the host asks the guest to audit.
struct GuestAuditOptions {
  bool exhaustive = false;
  uint64_t sample_regions = kDefaultSampleRegions;  // per disk, >= 1 (ignored if exhaustive)
  bool progress = false;                            // plan and progress lines on stderr
  int freeze_timeout_seconds = 600;
};
inline constexpr int kExhaustiveFreezeTimeoutSeconds = 3600;

// The guest command line: both workspace disks (design.md contracts: vda system, vdb home).
std::vector<std::string> GuestAuditArgv(const GuestAuditOptions& options);

// What an audit of disks of these virtual sizes can cost the host, before it starts.
struct AuditCost {
  uint64_t peak_allocation = 0;  // PeakAllocationBound summed over the disks
  uint64_t max_read = 0;         // the most it reads (sampled: the sample; exhaustive: the disks)
};
AuditCost EstimateAuditCost(const std::vector<uint64_t>& disk_bytes, const GuestAuditOptions& options);

// Free space the host filesystem must keep beyond the audit's peak allocation.
inline constexpr uint64_t kHostFreeReserve = uint64_t{256} << 20;

// Refuses (kNoSpace, with the figures) unless `available` bytes on the filesystem
// holding `dir` cover `cost.peak_allocation` plus kHostFreeReserve.
Status CheckHostFreeSpace(const std::string& dir, uint64_t available, const AuditCost& cost);

// Bytes available to an unprivileged writer on the filesystem holding `dir` (statvfs).
Result<uint64_t> HostAvailableBytes(const std::string& dir);

// A progress or plan line the guest wrote on stderr ("plan: ..." / "progress: ..."), sanitized
// for the user's terminal; nullopt for any other line.
std::optional<std::string> GuestProgressLine(const std::string& line);

// What running the audit in the guest produced.
struct GuestRun {
  int exit_code = -1;
  std::string out;  // at most kMaxReportBytes are kept by the caller
  std::string err;
};

// Parses the guest's report and settles every unresolved block of base disks against `base`
// (the workspace's raw base image; may be null only if the guest listed none). A guest error
// (exit 2, or any exit other than 0/1) becomes an Error quoting its stderr; a report that
// contradicts the exit status is kCorrupt.
Result<AuditReport> SettleGuestAudit(const GuestRun& run, BaseImage* base);

// Finds the static audit binary on the host: $CLOISTER_AUDIT_BIN, else next to the running
// executable (<dir>/cloister-audit, <dir>/../audit/cloister-audit), else
// /usr/lib/cloister/cloister-audit.
Result<std::string> FindAuditBinary();

// Printable-ASCII, single-line, at most `max` characters of untrusted text.
std::string SanitizeGuestText(const std::string& text, size_t max = 300);

}  // namespace cloister::audit
