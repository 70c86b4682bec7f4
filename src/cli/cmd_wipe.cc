#include "cli/commands.h"
#include "cli/store_verbs.h"

namespace cloister::cli {

void AddWipeCommand(CLI::App& app, Cli& cli) {
  AddDisposalVerb(
      app, cli, "wipe",
      "Drop the system disk and home together (and every checkpoint), clearing the compromised "
      "flag, and regenerate the workspace SSH key. Settings and credentials are kept; -v host "
      "folders are never touched",
      [](const WorkspaceConfig& c) {
        return "Wipe workspace '" + c.name + "'? Its system disk and home are dropped with " +
               CountNoun(c.checkpoints.size(), "checkpoint") +
               "; the next start boots the base image with an empty home, and the workspace "
               "SSH key is regenerated (add the new one where the old was authorised). "
               "Settings and credentials are kept; host folders shared with -v are not "
               "touched.";
      },
      [](Store& s, const std::string& n) { return s.Wipe(n); },
      "Wiped '%s': fresh system disk at next start, empty home, new SSH key, compromised flag "
      "cleared.");
}

}  // namespace cloister::cli
