#include "cli/commands.h"
#include "cli/disposal_prompts.h"
#include "cli/store_verbs.h"

namespace cloister::cli {

void AddResetCommand(CLI::App& app, Cli& cli) {
  AddDisposalVerb(
      app, cli, "reset",
      "Drop the system disk; the next start clones the base image again. Home, checkpoints, "
      "settings, credentials and keys are kept",
      ResetPrompt,
      [](Store& s, const std::string& n, bool) { return s.Reset(n); },
      "Reset '%s': the system disk will be cloned from the base image at the next start.");
}

}  // namespace cloister::cli
