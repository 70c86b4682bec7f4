#include "cli/commands.h"

#include "cli/cli.h"

namespace cloister::cli {

void AddAllCommands(CLI::App& app, Cli& cli) {
  AddVersionCommand(app, cli);
  AddCredCommand(app, cli);
  AddImageCommand(app, cli);
}

}  // namespace cloister::cli
