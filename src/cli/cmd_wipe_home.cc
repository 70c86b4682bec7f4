#include "cli/commands.h"
#include "cli/disposal_prompts.h"
#include "cli/store_verbs.h"

namespace cloister::cli {

void AddWipeHomeCommand(CLI::App& app, Cli& cli) {
  AddDisposalVerb(
      app, cli, "wipe-home",
      "Replace the home image with an empty one and regenerate the workspace keypair (every "
      "checkpoint goes too: each holds a copy of home)",
      WipeHomePrompt,
      [](Store& s, const std::string& n, bool) { return s.WipeHome(n); },
      "Wiped the home of '%s' and regenerated its keypair.");
}

}  // namespace cloister::cli
