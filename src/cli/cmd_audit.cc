// `cloister audit residue NAME [--json] [--max-regions N]`: runs the residue audit inside the
// workspace's running VM (the static cloister-audit from the metadata disk, as root, through the
// guest agent), settles the blocks it could not classify against the workspace's base image on
// the host, and prints the report. Exit 0: clean; 1: foreign bytes found; 2: the audit could not
// run (nothing is claimed then).
//
// SECURITY: the report, stdout and stderr come from the guest: the report is parsed by the
// bounded ParseAuditReport (inside SettleGuestAudit), stderr is shown only through
// SanitizeGuestText, and what we keep of each stream is capped at kMaxReportBytes.
#include <fcntl.h>
#include <unistd.h>

#include <thread>

#include "audit/host.h"
#include "audit/probe.h"
#include "audit/report.h"
#include "channel/exec_client.h"
#include "cli/cli.h"
#include "cli/commands.h"
#include "store/store.h"
#include "supervisor/launcher.h"

namespace cloister::cli {

namespace {

// Reads `fd` to EOF, keeping at most `cap` bytes (the rest is drained so the guest never blocks).
std::thread Drain(int fd, std::string& into, size_t cap) {
  return std::thread([fd, &into, cap] {
    char buf[65536];
    ssize_t n;
    while ((n = read(fd, buf, sizeof buf)) > 0) {
      size_t room = into.size() < cap ? cap - into.size() : 0;
      into.append(buf, std::min(room, static_cast<size_t>(n)));
    }
  });
}

Result<audit::GuestRun> RunGuestAudit(Store& store, const std::string& name, uint64_t max_regions) {
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
  std::thread re = Drain(err[0], run.err, 64 << 10);
  channel::ExecRequest req;
  req.argv = audit::GuestAuditArgv(max_regions);
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
  auto* audit = app.add_subcommand("audit", "Check a workspace's disks from inside its VM");
  audit->require_subcommand(1);
  auto* residue = audit->add_subcommand(
      "residue",
      "Probe every free 64 KiB region of the guest's disks for data that is not ours: zero, "
      "written by the probe, or identical to the base image is clean; anything else is foreign. "
      "Runs as root in the running VM with the filesystems frozen, and never writes to a block "
      "the filesystem has in use. Exit 0 clean, 1 foreign bytes found, 2 the audit could not run");
  struct Opts {
    std::string name;
    bool json = false;
    uint64_t max_regions = 0;
  };
  auto o = std::make_shared<Opts>();
  residue->add_option("NAME", o->name, "Workspace name (must be running)")->required();
  residue->add_flag("--json", o->json, "Print the report as JSON");
  residue->add_option("--max-regions", o->max_regions,
                      "Probe at most N free regions per disk (default 0: all of them)");
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
    if (!o->json) cli.err() << "audit: probing the disks of " << o->name << " (filesystems frozen while probing)...\n";
    auto run = RunGuestAudit(store, o->name, o->max_regions);
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
