#include <sstream>

#include "cli/commands.h"
#include "cli/disposal_prompts.h"
#include "cli/store_verbs.h"
#include "lifecycle/lifecycle.h"
#include "supervisor/launcher.h"

namespace cloister::cli {

void AddWipeCommand(CLI::App& app, Cli& cli) {
  AddDisposalVerb(
      app, cli, "wipe",
      "Drop the system disk and home together (and every checkpoint), clearing the compromised "
      "flag, and regenerate the workspace SSH key. Settings and credentials are kept; -v host "
      "folders are never touched",
      WipePrompt,
      [](Store& s, const std::string& n, bool) -> Status {
        // The lifecycle table lets a wipe go on a live VM only when it is paused (frozen by the
        // compromise detector; `cloister wipe` is the fix the refusals name): stop it first, a
        // kill, since a frozen guest cannot power off. Any other live state: the store refuses.
        vm::VmStatus st = vm::WorkspaceStatus(s, n);
        if (lifecycle::IsLive(st.state) &&
            lifecycle::Lookup(st.state, lifecycle::Action::kWipe).verdict ==
                lifecycle::Verdict::kGo) {
          vm::StopOptions so;
          so.force = true;
          std::ostringstream quiet;
          RETURN_IF_ERROR(vm::StopWorkspace(s, n, so, quiet));
        }
        return s.Wipe(n);
      },
      "Wiped '%s': fresh system disk at next start, empty home, new SSH key, compromised flag "
      "cleared.");
}

}  // namespace cloister::cli
