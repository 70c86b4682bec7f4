// `cloister attach NAME`: attaches the terminal to the workspace's tmux session (created on first
// attach). Detaching (C-b d) leaves the VM and the session running.
#include <unistd.h>

#include "channel/exec_client.h"
#include "cli/cli.h"
#include "cli/commands.h"
#include "store/store.h"
#include "supervisor/launcher.h"

namespace cloister::cli {

void AddAttachCommand(CLI::App& app, Cli& cli) {
  auto* cmd = app.add_subcommand("attach", "Attach this terminal to the workspace's tmux session");
  auto name = std::make_shared<std::string>();
  cmd->add_option("NAME", *name, "Workspace name")->required();
  cmd->callback([&cli, name] {
    auto store = Store::Open(cli.StoreRoot());
    if (!store.ok()) return (void)cli.Fail(store.error());
    auto fd = vm::OpenExecStream(**store, *name);
    if (!fd.ok()) return (void)cli.Fail(fd.error());
    auto code = channel::RunAttach(*fd);
    close(*fd);
    if (!code.ok()) return (void)cli.Fail(code.error());
    cli.exit_code = *code;
  });
}

}  // namespace cloister::cli
