// `cloister _supervise NAME` (hidden): the per-workspace supervisor process, started (daemonised)
// by `cloister start`. See vm/supervisor.h.
#include "cli/cli.h"
#include "cli/commands.h"
#include "cli/image_resolver.h"
#include "supervisor/supervisor.h"

namespace cloister::cli {

void AddSuperviseCommand(CLI::App& app, Cli& cli) {
  auto* cmd = app.add_subcommand("_supervise", "Run a workspace's supervisor (internal)");
  cmd->group("");  // hidden from --help
  struct Opts {
    std::string name;
    std::string accel = "tcg";
    int progress_fd = -1;
    int ready_timeout = 600;
    bool no_sandbox = false;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("NAME", o->name)->required();
  cmd->add_option("--accel", o->accel);
  cmd->add_option("--progress-fd", o->progress_fd);
  cmd->add_option("--ready-timeout", o->ready_timeout);
  cmd->add_flag("--no-sandbox", o->no_sandbox);
  cmd->callback([&cli, o] {
    vm::SupervisorOptions so;
    so.store_root = cli.StoreRoot();
    so.name = o->name;
    so.accel = o->accel == "kvm" ? vm::Accel::kKvm : vm::Accel::kTcg;
    so.progress_fd = o->progress_fd;
    so.ready_timeout = std::chrono::seconds(o->ready_timeout);
    so.sandbox = !o->no_sandbox;
    std::string root = cli.StoreRoot();
    so.resolve_image = [root](const std::string& spec) -> Result<std::string> {
      ASSIGN_OR_RETURN(ImageIdentity image, ResolveImageSpec(Env::Default(), root, spec));
      return image.path;
    };
    cli.exit_code = vm::RunSupervisor(so);
  });
}

}  // namespace cloister::cli
