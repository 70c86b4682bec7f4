#include "cli/cli.h"
#include "cli/commands.h"
#include "cli/version.h"

namespace cloister::cli {

void AddVersionCommand(CLI::App& app, Cli& cli) {
  auto* cmd = app.add_subcommand("version", "Print cloister's version");
  auto json = std::make_shared<bool>(false);
  cmd->add_flag("--json", *json, "Print as JSON");
  cmd->callback([&cli, json] {
    if (*json) {
      cli.PrintJson({{"version", kCloisterVersion}, {"remote_protocol", kRemoteProtocolVersion}});
    } else {
      cli.out() << "cloister " << kCloisterVersion << "\n";
    }
  });
}

}  // namespace cloister::cli
