#include <sstream>

#include "cli/commands.h"
#include "cli/disposal_prompts.h"
#include "cli/store_verbs.h"
#include "lifecycle/lifecycle.h"
#include "supervisor/launcher.h"

namespace cloister::cli {

void AddRmCommand(CLI::App& app, Cli& cli) {
  AddDisposalVerb(
      app, cli, "rm",
      "Delete a workspace and everything it owns: both images, every checkpoint, the secrets "
      "file, host-side SSH material, and its MAC reservation. A running, paused or booting "
      "workspace is refused unless -f",
      RmPrompt,
      [](Store& s, const std::string& n, bool force) -> Status {
        // docker's `rm -f`: a live VM is stopped first (forced: QEMU is killed, its writes since
        // the last flush are lost with the workspace anyway), then the workspace is deleted.
        if (force) {
          vm::VmStatus st = vm::WorkspaceStatus(s, n);
          if (lifecycle::IsLive(st.state) || st.state == lifecycle::State::kBroken) {
            vm::StopOptions so;
            so.force = true;
            std::ostringstream quiet;
            RETURN_IF_ERROR(vm::StopWorkspace(s, n, so, quiet));
          }
        }
        return s.Remove(n);
      },
      "Deleted '%s'.",
      "Force, as docker rm -f: stop the VM first (a kill) if it is running, booting or paused, "
      "then delete, without asking");
}

}  // namespace cloister::cli
