#include "cli/commands.h"
#include "cli/store_verbs.h"

namespace cloister::cli {

void AddResetCommand(CLI::App& app, Cli& cli) {
  AddDisposalVerb(
      app, cli, "reset",
      "Drop the system disk; the next start clones the base image again. Home, checkpoints, "
      "settings, credentials and keys are kept",
      [](const WorkspaceConfig& c) {
        return "Reset workspace '" + c.name +
               "' to its base image? Its system disk is dropped: everything installed "
               "system-wide and every edit to /etc, /var, /usr and /opt is lost. Home, "
               "checkpoints, settings, credentials and keys are kept.";
      },
      [](Store& s, const std::string& n) { return s.Reset(n); },
      "Reset '%s': the system disk will be cloned from the base image at the next start.");
}

}  // namespace cloister::cli
