// `cloister reboot NAME`: graceful power-off, then a fresh boot (new metadata disk, new boot id,
// a new proven-boot checkpoint); returns when the guest agent is ready again.
#include "cli/cli.h"
#include "cli/commands.h"
#include "store/store.h"
#include "supervisor/launcher.h"

namespace cloister::cli {

void AddRebootCommand(CLI::App& app, Cli& cli) {
  auto* cmd = app.add_subcommand("reboot", "Reboot a running workspace's VM");
  auto name = std::make_shared<std::string>();
  cmd->add_option("NAME", *name, "Workspace name")->required();
  cmd->callback([&cli, name] {
    auto store = Store::Open(cli.StoreRoot());
    if (!store.ok()) return (void)cli.Fail(store.error());
    if (Status st = vm::RebootWorkspace(**store, *name, cli.err()); !st.ok()) {
      return (void)cli.Fail(st.error());
    }
    cli.err() << "cloister: " << *name << " is running\n";
  });
}

}  // namespace cloister::cli
