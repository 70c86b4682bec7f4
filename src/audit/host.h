// Host side of `cloister audit residue`: what to run in the guest, and how to settle its answer.
//
// SECURITY: everything in GuestRun comes from the guest. The report is parsed by
// ParseAuditReport (bounded, hostile-input parser); stderr is only ever shown truncated and
// stripped to printable ASCII.
#pragma once

#include <cstdint>
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

// The guest command line: both workspace disks (design.md contracts: vda system, vdb home).
// max_regions 0 probes every free region.
std::vector<std::string> GuestAuditArgv(uint64_t max_regions);

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
