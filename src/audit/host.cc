#include "audit/host.h"

#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <filesystem>

#include "base/strings.h"

namespace cloister::audit {

std::vector<std::string> GuestAuditArgv(const GuestAuditOptions& options) {
  std::vector<std::string> argv = {kGuestAuditPath, "--json", "--disk", "/dev/vda:base",
                                   "--disk", "/dev/vdb:home"};
  if (options.exhaustive) {
    argv.push_back("--exhaustive");
  } else {
    argv.insert(argv.end(), {"--sample", std::to_string(options.sample_regions)});
  }
  if (options.progress) argv.push_back("--progress");
  argv.insert(argv.end(), {"--freeze-timeout", std::to_string(options.freeze_timeout_seconds)});
  return argv;
}

AuditCost EstimateAuditCost(const std::vector<uint64_t>& disk_bytes, const GuestAuditOptions& options) {
  AuditCost cost;
  AuditOptions a;
  a.exhaustive = options.exhaustive;
  a.sample_regions = options.sample_regions;
  for (uint64_t bytes : disk_bytes) {
    cost.peak_allocation += PeakAllocationBound(bytes, a);
    cost.max_read += options.exhaustive ? bytes
                                        : std::min(bytes, options.sample_regions * kRegionSize);
  }
  return cost;
}

Status CheckHostFreeSpace(const std::string& dir, uint64_t available, const AuditCost& cost) {
  const uint64_t need = cost.peak_allocation + kHostFreeReserve;
  if (available >= need) return OkStatus();
  return Error(ErrorCode::kNoSpace,
               "the host filesystem holding " + dir + " has " + FormatSize(available) +
                   " free; the audit can allocate up to " + FormatSize(cost.peak_allocation) +
                   " there at its peak, and leaves at least " + FormatSize(kHostFreeReserve) +
                   " free for everything else",
               "free at least " + FormatSize(need - available) + " on that filesystem and retry");
}

Result<uint64_t> HostAvailableBytes(const std::string& dir) {
  struct statvfs st;
  if (statvfs(dir.c_str(), &st) != 0) return ErrnoError("statvfs " + dir, errno);
  return static_cast<uint64_t>(st.f_bavail) * st.f_frsize;
}

std::optional<std::string> GuestProgressLine(const std::string& line) {
  // SECURITY: guest bytes: only lines with our two prefixes, shown sanitized and bounded.
  if (line.rfind("plan: ", 0) != 0 && line.rfind("progress: ", 0) != 0) return std::nullopt;
  return SanitizeGuestText(line, 160);
}

std::string SanitizeGuestText(const std::string& text, size_t max) {
  std::string out;
  for (char c : text) {
    if (out.size() >= max) break;
    unsigned char u = static_cast<unsigned char>(c);
    out += (u >= 0x20 && u < 0x7f) ? c : ' ';
  }
  return out;
}

Result<AuditReport> SettleGuestAudit(const GuestRun& run, BaseImage* base) {
  if (run.exit_code != kAuditClean && run.exit_code != kAuditFoundForeign) {
    // The last non-empty line of stderr is the guest binary's error message.
    std::string last;
    size_t end = run.err.size();
    while (end > 0) {
      size_t start = run.err.rfind('\n', end - 1);
      start = start == std::string::npos ? 0 : start + 1;
      if (start < end) {
        last = run.err.substr(start, end - start);
        break;
      }
      end = start == 0 ? 0 : start - 1;
    }
    return Error(ErrorCode::kUnavailable,
                 "the audit failed in the guest (exit " + std::to_string(run.exit_code) +
                     "): " + SanitizeGuestText(last),
                 "the guest's disks were not audited; check `cloister exec NAME -- dmesg`");
  }
  ASSIGN_OR_RETURN(AuditReport report, ParseAuditReport(run.out));
  if (run.exit_code == kAuditClean) {
    for (const DiskReport& d : report.disks) {
      if (!d.CleanPendingBase()) {
        return Error(ErrorCode::kCorrupt, "the guest's audit exited 0 but reports an unclean disk");
      }
    }
  }
  for (DiskReport& d : report.disks) {
    if (d.unresolved.empty()) continue;
    if (base == nullptr) {
      return Error(ErrorCode::kFailedPrecondition,
                   d.device + ": the guest listed blocks to compare with the base image, but the "
                              "workspace has no base image to compare them with");
    }
    RETURN_IF_ERROR(ResolveWithBase(d, *base));
  }
  return report;
}

Result<std::string> FindAuditBinary() {
  namespace fs = std::filesystem;
  if (const char* env = std::getenv("CLOISTER_AUDIT_BIN"); env != nullptr && *env) {
    if (access(env, R_OK) == 0) return std::string(env);
    return Error(ErrorCode::kNotFound, std::string("CLOISTER_AUDIT_BIN=") + env + " is not readable");
  }
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  std::vector<fs::path> candidates;
  if (!ec) {
    candidates.push_back(exe.parent_path() / kAuditBinaryName);
    candidates.push_back(exe.parent_path() / ".." / "audit" / kAuditBinaryName);
  }
  candidates.push_back(fs::path("/usr/lib/cloister") / kAuditBinaryName);
  for (const fs::path& p : candidates) {
    if (fs::is_regular_file(p, ec)) return p.lexically_normal().string();
  }
  return Error(ErrorCode::kNotFound, "the static cloister-audit binary was not found",
               "build the cloister-audit target or set CLOISTER_AUDIT_BIN");
}

}  // namespace cloister::audit
