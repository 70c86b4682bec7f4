// Auditing a disk in place: finds whether its filesystem is mounted, freezes it if so (fail
// closed: no freeze, no audit), runs the probe (audit/probe.h), and thaws.
//
// Runs as root inside the guest (the static `cloister-audit` binary on the metadata disk), and on
// image files in the host's tests. While a mounted filesystem is frozen, every writer to it blocks:
// this code writes nothing but the probe's raw-device blocks until it has thawed, and a watchdog
// child process thaws the filesystem if this process dies or overruns `freeze_timeout`.
#pragma once

#include <chrono>
#include <string>

#include "audit/probe.h"
#include "base/result.h"

namespace cloister::audit {

// The mount point of the filesystem on block device `device` (from /proc/self/mountinfo), or
// empty if it is not mounted.
Result<std::string> FindMountpoint(const std::string& device);

struct DiskAuditOptions {
  AuditOptions audit;
  // The watchdog thaws a frozen filesystem after this long; the probe stops (kStoppedTimeLimit)
  // a margin before that (a tenth of it, at least 5 s), so it never writes to a thawed one.
  std::chrono::seconds freeze_timeout{600};
};

// Audits `path`: a block device (mounted filesystems are frozen for the duration; unmounted ones
// are opened exclusively so nothing can mount them meanwhile) or a regular image file (the caller
// guarantees no one uses it).
Result<DiskReport> AuditDisk(const std::string& path, const DiskAuditOptions& options);

}  // namespace cloister::audit
