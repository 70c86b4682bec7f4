// `cloister attach NAME [--wait S]`: attaches the terminal to the workspace's tmux session (created
// on first attach). Detaching (C-b d) leaves the VM and the session running. A booting workspace
// is waited for; a paused one refuses, and a session it was in ends naming the wipe. Under
// --auto-ports each automatic forward (its host port is the host's pick) is announced on a line.
#include <unistd.h>

#include <chrono>
#include <memory>

#include "channel/exec_client.h"
#include "cli/cli.h"
#include "cli/commands.h"
#include "cli/port_watch.h"
#include "store/store.h"
#include "supervisor/launcher.h"
#include "supervisor/ports.h"

namespace cloister::cli {

void AddAttachCommand(CLI::App& app, Cli& cli) {
  auto* cmd = app.add_subcommand("attach", "Attach this terminal to the workspace's tmux session");
  auto name = std::make_shared<std::string>();
  auto wait_s = std::make_shared<unsigned>(600);
  cmd->add_option("NAME", *name, "Workspace name")->required();
  cmd->add_option("--wait", *wait_s,
                  "Seconds to wait for a booting workspace to be ready (default 600)");
  cmd->footer("SIGTERM or SIGHUP (forwarded to tmux) closes the session if it has not ended "
              "within 5 s; a second signal closes it at once.");
  cmd->callback([&cli, name, wait_s] {
    auto store = Store::Open(cli.StoreRoot());
    if (!store.ok()) return (void)cli.Fail(store.error());
    vm::ReadyWait wait;
    wait.action = lifecycle::Action::kAttach;
    wait.timeout = std::chrono::seconds(*wait_s);
    if (isatty(STDERR_FILENO)) wait.progress = &cli.err();  // boot stages, on a terminal only
    auto fd = vm::OpenExecStream(**store, *name, {}, wait);
    if (!fd.ok()) return (void)cli.Fail(fd.error());
    std::unique_ptr<AutoPortAnnouncer> ports = AnnounceAutoPorts(**store, *name, cli.err());
    auto code = channel::RunAttach(*fd);
    ports.reset();
    close(*fd);
    if (!code.ok()) {
      return (void)cli.Fail(
          vm::ExplainEndedSession(**store, *name, lifecycle::Action::kAttach, code.error()));
    }
    cli.exit_code = *code;
  });
}

}  // namespace cloister::cli
