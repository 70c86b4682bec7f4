#include "cli/cli.h"
#include "cli/commands.h"

namespace cloister::cli {

void AddVersionCommand(CLI::App& app, Cli& cli) {
  auto* cmd = app.add_subcommand("version", "Print cloister's version");
  auto json = std::make_shared<bool>(false);
  cmd->add_flag("--json", *json, "Print as JSON");
  cmd->callback([&cli, json] {
    if (*json) cli.PrintJson({{"version", "0.1.0"}});
    else cli.out() << "cloister 0.1.0\n";
  });
}

}  // namespace cloister::cli
