// cloister-audit: the residue audit, as a static binary the host runs in the guest as root.
//
//   cloister-audit [--json] --disk /dev/vda:base --disk /dev/vdb:home [--max-regions N]
//                  [--base-image FILE] [--freeze-timeout SECONDS]
//
// Exit status: 0 clean (apart from blocks listed for the host's base-image comparison), 1 foreign
// bytes (or any unclean result), 2 error. With --json, stdout is
// one JSON document (audit/report.h). Without --base-image, non-zero blocks of base disks are
// listed by hash for the host to compare with the base image it holds.
#include <iostream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "audit/audit.h"
#include "audit/report.h"

int main(int argc, char** argv) {
  using namespace cloister;
  using namespace cloister::audit;
  CLI::App app{"cloister-audit: probe free ext4 regions for residue from before this disk was yours"};
  std::vector<std::string> disks;
  bool json_out = false;
  uint64_t max_regions = 0;
  std::string base_image;
  int freeze_timeout = 600;
  app.add_option("--disk", disks, "DEVICE:KIND, KIND is base or home (repeatable)")->required();
  app.add_flag("--json", json_out, "print the report as JSON");
  app.add_option("--max-regions", max_regions, "probe at most N free regions per disk, spread evenly (0: all)");
  app.add_option("--base-image", base_image, "raw base image to compare base disks with (host-side use)");
  app.add_option("--freeze-timeout", freeze_timeout, "thaw after this many seconds whatever happens")
      ->check(CLI::Range(1, 3600));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? 0 : kAuditError;
  }

  auto fail = [](const Error& e) {
    std::cerr << "cloister-audit: error: " << e.ToString() << "\n";
    return kAuditError;
  };
  auto run = NewRunId();
  if (!run.ok()) return fail(run.error());
  std::unique_ptr<BaseImage> base;
  if (!base_image.empty()) {
    auto b = OpenRawBaseImage(base_image);
    if (!b.ok()) return fail(b.error());
    base = std::move(b).value();
  }
  AuditReport report;
  report.run_id = *run;
  for (const std::string& spec : disks) {
    auto colon = spec.rfind(':');
    if (colon == std::string::npos) {
      return fail(Error(ErrorCode::kInvalidArgument, "--disk " + spec + " lacks :KIND", "e.g. --disk /dev/vdb:home"));
    }
    auto kind = ParseDiskKind(spec.substr(colon + 1));
    if (!kind.ok()) return fail(kind.error());
    DiskAuditOptions opts;
    opts.audit.run_id = *run;
    opts.audit.kind = *kind;
    opts.audit.base = *kind == DiskKind::kBase ? base.get() : nullptr;
    opts.audit.max_regions = max_regions;
    opts.freeze_timeout = std::chrono::seconds(freeze_timeout);
    auto r = AuditDisk(spec.substr(0, colon), opts);
    if (!r.ok()) return fail(r.error());
    report.disks.push_back(std::move(r).value());
  }
  if (json_out) {
    std::cout << ReportToJson(report).dump() << "\n";
  } else {
    std::cout << RenderReport(report, DiskHistory::kUnknown);
  }
  std::cout.flush();
  // Blocks awaiting the host's base-image comparison do not make the guest's verdict unclean; the
  // host settles them (audit/host.h).
  bool clean = true;
  for (const DiskReport& d : report.disks) clean = clean && d.CleanPendingBase();
  return clean ? kAuditClean : kAuditFoundForeign;
}
