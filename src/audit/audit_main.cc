// cloister-audit: the residue audit, as a static binary the host runs in the guest as root.
//
//   cloister-audit [--json] --disk /dev/vda:base --disk /dev/vdb:home
//                  [--sample N | --exhaustive] [--progress] [--max-not-given-back BYTES]
//                  [--base-image FILE] [--freeze-timeout SECONDS]
//
// Exit status: 0 clean (apart from blocks listed for the host's base-image comparison), 1 foreign
// bytes (or any unclean result), 2 error. With --json, stdout is
// one JSON document (audit/report.h). Without --base-image, non-zero blocks of base disks are
// listed by hash for the host to compare with the base image it holds. With --progress, stderr
// gets one line per disk before probing ("plan: ...") and "progress: ..." lines as it goes.
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
  uint64_t sample = kDefaultSampleRegions;
  bool exhaustive = false;
  bool progress = false;
  uint64_t not_given_back = kDefaultMaxNotGivenBackBytes;
  std::string base_image;
  int freeze_timeout = 600;
  app.add_option("--disk", disks, "DEVICE:KIND, KIND is base or home (repeatable)")->required();
  app.add_flag("--json", json_out, "print the report as JSON");
  auto* sample_opt = app.add_option("--sample,--max-regions", sample,
                                    "probe a random sample of N free regions per disk, spread over it")
                         ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 40));
  app.add_flag("--exhaustive", exhaustive, "probe every free region (reads the whole free space)")
      ->excludes(sample_opt);
  app.add_flag("--progress", progress, "report the plan and progress on stderr");
  app.add_option("--max-not-given-back", not_given_back,
                 "stop once this many bytes of probed regions could not be given back by discard")
      ->check(CLI::Range(kRegionSize, uint64_t{1} << 40));
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
    opts.audit.exhaustive = exhaustive;
    opts.audit.sample_regions = sample;
    opts.audit.max_not_given_back_bytes = not_given_back;
    const std::string device = spec.substr(0, colon);
    if (progress) {
      // Plain ASCII lines; the host shows them only sanitized.
      opts.audit.progress = [device](uint64_t done, uint64_t total) {
        if (done == 0) {
          std::cerr << "plan: " << device << ": probing " << total << " free regions ("
                    << (total * kRegionSize >> 20) << " MiB to read)" << std::endl;
        } else {
          std::cerr << "progress: " << device << ": " << done << "/" << total << " regions ("
                    << done * 100 / total << "%)" << std::endl;
        }
      };
    }
    opts.freeze_timeout = std::chrono::seconds(freeze_timeout);
    auto r = AuditDisk(device, opts);
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
