// `cloister audit residue NAME [--json] [--sample N | --exhaustive]`: runs the residue audit
// inside the workspace's running VM (the static cloister-audit from the metadata disk, as root,
// through the guest agent), settles the blocks it could not classify against the workspace's base
// image on the host, and prints the report. Exit 0: clean; 1: foreign bytes found; 2: the audit
// could not run (nothing is claimed then). Before it starts, the host's free space is checked
// against the audit's peak allocation (audit/host.h) and the audit refuses if it is short.
//
// SECURITY: the report, stdout and stderr come from the guest: the report is parsed by the
// bounded ParseAuditReport (inside SettleGuestAudit), stderr is shown only through
// SanitizeGuestText (progress lines through GuestProgressLine), and what we keep of each stream
// is capped at kMaxReportBytes.
#include <fcntl.h>
#include <unistd.h>

#include <functional>
#include <thread>

#include "audit/host.h"
#include "audit/probe.h"
#include "audit/report.h"
#include "base/strings.h"
#include "channel/exec_client.h"
#include "cli/cli.h"
#include "cli/commands.h"
#include "store/store.h"
#include "supervisor/launcher.h"

namespace cloister::cli {

namespace {

// Reads `fd` to EOF, keeping at most `cap` bytes (the rest is drained so the guest never blocks).
// Each complete line is also handed to `on_line` if set (at most 4 KiB of a line are kept).
std::thread Drain(int fd, std::string& into, size_t cap,
                  std::function<void(const std::string&)> on_line = nullptr) {
  return std::thread([fd, &into, cap, on_line] {
    char buf[65536];
    ssize_t n;
    std::string line;
    while ((n = read(fd, buf, sizeof buf)) > 0) {
      size_t room = into.size() < cap ? cap - into.size() : 0;
      into.append(buf, std::min(room, static_cast<size_t>(n)));
      if (!on_line) continue;
      for (ssize_t i = 0; i < n; ++i) {
        if (buf[i] == '\n') {
          on_line(line);
          line.clear();
        } else if (line.size() < 4096) {
          line += buf[i];
        }
      }
    }
  });
}

Result<audit::GuestRun> RunGuestAudit(Store& store, const std::string& name,
                                      const audit::GuestAuditOptions& options, Cli& cli) {
  ASSIGN_OR_RETURN(int stream, vm::OpenExecStream(store, name));
  int out[2], err[2];
  if (pipe2(out, O_CLOEXEC) != 0) {
    close(stream);
    return ErrnoError("pipe", errno);
  }
  if (pipe2(err, O_CLOEXEC) != 0) {
    close(stream);
    close(out[0]);
    close(out[1]);
    return ErrnoError("pipe", errno);
  }
  audit::GuestRun run;
  std::thread ro = Drain(out[0], run.out, audit::kMaxReportBytes);
  std::function<void(const std::string&)> show;
  if (options.progress) {
    show = [&cli](const std::string& line) {
      if (auto p = audit::GuestProgressLine(line)) cli.err() << "audit: " << *p << std::endl;
    };
  }
  std::thread re = Drain(err[0], run.err, 64 << 10, show);
  channel::ExecRequest req;
  req.argv = audit::GuestAuditArgv(options);
  req.user = "root";
  auto exit = channel::RunExec(stream, req, channel::ExecIo{-1, out[1], err[1]});
  close(out[1]);
  close(err[1]);
  ro.join();
  re.join();
  close(out[0]);
  close(err[0]);
  close(stream);
  if (!exit.ok()) return exit.error().WithContext("running the audit in " + name);
  run.exit_code = exit->ShellCode();
  return run;
}

}  // namespace

void AddAuditCommand(CLI::App& app, Cli& cli) {
  auto* audit = app.add_subcommand(
      "audit",
      "Check a workspace's disks from inside its VM. `audit residue NAME` probes a random sample "
      "of " + std::to_string(audit::kDefaultSampleRegions) +
          " free regions per disk by default (under a minute, a few MiB of host disk at most); "
          "--exhaustive probes all of them (reads the disks' whole free space, filesystems "
          "frozen throughout)");
  audit->require_subcommand(1);
  auto* residue = audit->add_subcommand(
      "residue",
      "Probe free 64 KiB regions of the guest's disks for data that is not ours: zero, written by "
      "the probe, or identical to the base image is clean; anything else is foreign. Runs as root "
      "in the running VM with the filesystems frozen, and never writes to a block the filesystem "
      "has in use. By default it probes a random sample of " +
          std::to_string(audit::kDefaultSampleRegions) +
          " free regions per disk, spread over the disk (under a minute, even under software "
          "emulation; it finds foreign data in 0.3% or more of the free space with 95% "
          "probability, not a few stray regions), and gives each probed region back to the host "
          "with a discard right after reading it, so the host disk it uses at its peak is a few "
          "MiB (the bound is printed first; refused, with the figures, if the host has less "
          "free). Exit 0 clean, 1 foreign bytes found, 2 the audit could not run");
  struct Opts {
    std::string name;
    bool json = false;
    uint64_t sample = audit::kDefaultSampleRegions;
    bool exhaustive = false;
  };
  auto o = std::make_shared<Opts>();
  residue->add_option("NAME", o->name, "Workspace name (must be running)")->required();
  residue->add_flag("--json", o->json, "Print the report as JSON");
  auto* sample = residue
                     ->add_option("--sample,--max-regions", o->sample,
                                  "Probe a random sample of N free regions per disk (default " +
                                      std::to_string(audit::kDefaultSampleRegions) + ")")
                     ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 40));
  residue
      ->add_flag("--exhaustive", o->exhaustive,
                 "Probe every free region instead: reads the disks' whole free space (up to the "
                 "64 GiB home and the system disk: minutes per 10 GiB, longer under software "
                 "emulation) with the filesystems frozen the whole time (the workspace's programs "
                 "wait), at most 1 h; says its cost first and shows progress. Each region is still "
                 "given back at once, so the host disk it uses stays small (up to 8 MiB of qcow2 "
                 "tables on a 64 GiB home, ~10 MiB in all)")
      ->excludes(sample);
  residue->callback([&cli, o] {
    auto fail = [&cli](const Error& e) {
      cli.Fail(e);
      cli.exit_code = audit::kAuditError;
    };
    auto opened = Store::Open(cli.StoreRoot());
    if (!opened.ok()) return fail(opened.error());
    Store& store = **opened;
    auto config = store.LoadConfig(o->name);
    if (!config.ok()) return fail(config.error());
    // The base image is read on the host, never trusted from the guest.
    auto base = audit::OpenRawBaseImage(config->image.path);
    if (!base.ok()) {
      return fail(base.error().WithContext("opening the base image of " + o->name));
    }
    audit::GuestAuditOptions guest;
    guest.exhaustive = o->exhaustive;
    guest.sample_regions = o->sample;
    guest.progress = o->exhaustive;
    if (o->exhaustive) guest.freeze_timeout_seconds = audit::kExhaustiveFreezeTimeoutSeconds;
    // Fail closed on the host's disk: the audit's peak allocation must fit, with room to spare.
    const std::string dir = store.Paths(o->name).dir;
    const audit::AuditCost cost =
        audit::EstimateAuditCost({config->image.size, config->home_size}, guest);
    auto available = audit::HostAvailableBytes(dir);
    if (!available.ok()) return fail(available.error().WithContext("checking the host's free space"));
    Status room = audit::CheckHostFreeSpace(dir, *available, cost);
    if (!room.ok()) return fail(room.error());
    if (o->exhaustive) {
      cli.err() << "audit: exhaustive: probing every free 64 KiB region of " << o->name
                << "'s disks: reads up to " << FormatSize(cost.max_read)
                << " (their free space), with the filesystems frozen throughout (at most "
                << audit::kExhaustiveFreezeTimeoutSeconds / 60 << " min); extra host disk at "
                << "the peak at most " << FormatSize(cost.peak_allocation) << " (host has "
                << FormatSize(*available) << " free)\n";
    } else if (!o->json) {
      cli.err() << "audit: probing a sample of " << o->sample << " free regions per disk of "
                << o->name << " (filesystems frozen while probing; extra host disk at most "
                << FormatSize(cost.peak_allocation) << ")...\n";
    }
    auto run = RunGuestAudit(store, o->name, guest, cli);
    if (!run.ok()) return fail(run.error());
    auto report = audit::SettleGuestAudit(*run, base->get());
    if (!report.ok()) return fail(report.error());
    if (o->json) {
      cli.out() << audit::ReportToJson(*report).dump(2) << "\n";
    } else {
      cli.out() << audit::RenderReport(*report, audit::DiskHistory::kUnknown);
    }
    cli.exit_code = report->Clean() ? audit::kAuditClean : audit::kAuditFoundForeign;
  });
}

}  // namespace cloister::cli
