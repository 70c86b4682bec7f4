#include "cli/commands.h"
#include "cli/disposal_prompts.h"
#include "cli/store_verbs.h"

namespace cloister::cli {

void AddRmCommand(CLI::App& app, Cli& cli) {
  AddDisposalVerb(
      app, cli, "rm",
      "Delete a workspace and everything it owns: both images, every checkpoint, the secrets "
      "file, host-side SSH material, and its MAC reservation",
      RmPrompt,
      [](Store& s, const std::string& n) { return s.Remove(n); }, "Deleted '%s'.");
}

}  // namespace cloister::cli
