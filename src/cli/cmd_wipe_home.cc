#include "cli/commands.h"
#include "cli/store_verbs.h"

namespace cloister::cli {

void AddWipeHomeCommand(CLI::App& app, Cli& cli) {
  AddDisposalVerb(
      app, cli, "wipe-home",
      "Replace the home image with an empty one and regenerate the workspace keypair (every "
      "checkpoint goes too: each holds a copy of home)",
      [](const WorkspaceConfig& c) {
        return "Wipe the home of workspace '" + c.name + "'? /home/dev is replaced by an empty "
               "one, the workspace keypair is regenerated, and " +
               CountNoun(c.checkpoints.size(), "checkpoint") +
               " (copies of the old home) are deleted. The system disk, settings and "
               "credentials are kept.";
      },
      [](Store& s, const std::string& n) { return s.WipeHome(n); },
      "Wiped the home of '%s' and regenerated its keypair.");
}

}  // namespace cloister::cli
