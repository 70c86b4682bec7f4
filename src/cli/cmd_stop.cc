// `cloister stop NAME [--force] [--suspend] [--timeout S]`: graceful ACPI power-off through QMP,
// killed after the timeout; --force kills at once; --suspend saves RAM for the next start.
#include "cli/cli.h"
#include "cli/commands.h"
#include "store/store.h"
#include "supervisor/browser_vm.h"
#include "supervisor/launcher.h"
#include "supervisor/workspace.h"

namespace cloister::cli {

void AddStopCommand(CLI::App& app, Cli& cli) {
  auto* cmd = app.add_subcommand("stop", "Stop a workspace's VM (or suspend it with --suspend)");
  struct Opts {
    std::string name;
    bool force = false;
    bool suspend = false;
    int timeout = 60;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("NAME", o->name, "Workspace name")->required();
  cmd->add_flag("-f,--force", o->force, "Kill the VM now instead of a graceful power-off");
  cmd->add_flag("--suspend", o->suspend,
                "Save the VM's RAM to the workspace; the next start resumes it");
  cmd->add_option("--timeout", o->timeout, "Seconds to wait for a graceful power-off, then kill")
      ->default_str("60");
  cmd->callback([&cli, o] {
    if (o->force && o->suspend) {
      return (void)cli.Fail(Error(ErrorCode::kInvalidArgument, "--force and --suspend conflict"));
    }
    auto store = Store::Open(cli.StoreRoot());
    if (!store.ok()) return (void)cli.Fail(store.error());
    vm::StopOptions so;
    so.force = o->force;
    so.suspend = o->suspend;
    so.timeout = std::chrono::seconds(o->timeout);
    if (Status st = vm::StopWorkspace(**store, o->name, so, cli.err()); !st.ok()) {
      return (void)cli.Fail(st.error());
    }
    vm::CollectDeadEphemeral(**store);
    vm::CollectStaleBrowserDirs((*store)->root());  // browser VM disks a crash left
  });
}

}  // namespace cloister::cli
