// `cloister start NAME [-d] [--accel auto|kvm|tcg]`: boots the workspace's VM (or resumes a
// suspended one). Without -d it shows the boot's progress and returns once the guest agent reports
// a working terminal (like `limactl start`); with -d it returns as soon as the supervisor has QEMU
// running, ready or not (like `docker start`/`run -d`), printing NAME; `cloister ls` then shows
// booting, running, or the failure with the boot log. With --timings it prints each phase of the
// boot in ms on stdout (supervisor/boot_timings.h).
#include <chrono>

#include "base/agent_tools.h"
#include "cli/cli.h"
#include "cli/commands.h"
#include "store/store.h"
#include "supervisor/browser_vm.h"
#include "supervisor/boot_timings.h"
#include "supervisor/launcher.h"
#include "supervisor/workspace.h"

namespace cloister::cli {

void AddStartCommand(CLI::App& app, Cli& cli) {
  auto* cmd = app.add_subcommand(
      "start",
      "Start a workspace's VM (resumes it if it was suspended); returns when it is ready, or with "
      "-d as soon as QEMU runs");
  struct Opts {
    std::string name;
    std::string accel = "auto";
    int ready_timeout = 600;
    bool detach = false;
    bool timings = false;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("NAME", o->name, "Workspace name")->required();
  cmd->add_option("--accel", o->accel,
                  "auto (KVM where it can run a stock kernel, else TCG), kvm or tcg")
      ->default_str("auto");
  cmd->add_flag("-d,--detach", o->detach,
                "Return once QEMU runs, without waiting for the guest agent (the boot goes on in "
                "the background; `cloister ls` shows when it is running)");
  cmd->add_option("--ready-timeout", o->ready_timeout, "Seconds to wait for the guest agent")
      ->default_str("600");
  cmd->add_flag("--timings", o->timings,
                "Print each boot phase in ms on stdout once ready (host: disks, kernel-file, "
                "proxy, metadata-disk, qemu-spawn, qemu-start; guest clock: firmware, kernel, "
                "init-to-hook, agent-setup, terminal-probe (what the probe took beyond the setup, "
                "beside which it runs) and to-ready (from the probe to READY); host: checkpoint; "
                "a resume: resume), "
                "then the total as `start` saw it");
  cmd->callback([&cli, o] {
    auto t0 = std::chrono::steady_clock::now();
    if (o->timings && o->detach) {
      return (void)cli.Fail(Error(ErrorCode::kInvalidArgument,
                                  "--timings needs the boot to finish: it cannot go with -d",
                                  "drop -d, or `cloister start NAME --timings`"));
    }
    auto mode = vm::ParseAccelMode(o->accel);
    if (!mode.ok()) return (void)cli.Fail(mode.error());
    auto store = Store::Open(cli.StoreRoot());
    if (!store.ok()) return (void)cli.Fail(store.error());
    vm::CollectDeadEphemeral(**store);
    vm::CollectStaleBrowserDirs((*store)->root());  // browser VM disks a crash left
    vm::StartOptions so;
    so.accel = *mode;
    so.ready_timeout = std::chrono::seconds(o->ready_timeout);
    so.detach = o->detach;
    std::string timings_line;
    if (o->timings) so.timings = &timings_line;
    if (Status st = vm::StartWorkspace(**store, o->name, so, cli.err()); !st.ok()) {
      return (void)cli.Fail(st.error());
    }
    if (o->detach) {
      cli.err() << "cloister: " << o->name << " is booting in the background (`cloister ls`)\n";
      cli.out() << o->name << "\n";
      return;
    }
    cli.err() << "cloister: " << o->name << " is running\n";
    if (o->timings) {
      auto phases = vm::ParseTimingsLine(timings_line);
      if (!phases.ok()) {
        // Already running, or a supervisor of another version: nothing measured to show.
        cli.err() << "cloister: no boot timings (" << (timings_line.empty() ? std::string("none sent")
                                                      : phases.error().message()) << ")\n";
      } else {
        std::erase_if(*phases, [](const vm::BootPhase& p) { return p.first == "total"; });
        cli.out() << vm::FormatTimingsTable(
            *phases, std::chrono::duration_cast<std::chrono::milliseconds>(
                         std::chrono::steady_clock::now() - t0).count());
      }
    }
    if (auto c = (*store)->LoadConfig(o->name); c.ok() && c->tool != kDefaultToolName) {
      cli.err() << "cloister: " << o->name << " runs " << c->tool << " in its tmux session ("
                << "`cloister attach " << o->name << "`); the first boot after create or reset "
                << "installs it there (guest log /var/log/cloister-tool.log)\n";
    }
  });
}

}  // namespace cloister::cli
