// The confirmations of the destructive verbs (reset, wipe-home, wipe, rm, checkpoint restore/rm):
// one text per verb, asked by the CLI (cmd_*.cc) and shown by the dashboard (cmd_ui.cc) before
// it runs the same verb, so both name exactly what goes.
#pragma once

#include <string>

#include "cli/store_verbs.h"
#include "store/config.h"

namespace cloister::cli {

inline std::string ResetPrompt(const WorkspaceConfig& c) {
  return "Reset workspace '" + c.name +
         "' to its base image? Its system disk is dropped: everything installed "
         "system-wide and every edit to /etc, /var, /usr and /opt is lost. Home, "
         "checkpoints, settings, credentials and keys are kept.";
}

inline std::string WipeHomePrompt(const WorkspaceConfig& c) {
  return "Wipe the home of workspace '" + c.name + "'? /home/dev is replaced by an empty "
         "one, the workspace keypair is regenerated, and " +
         CountNoun(c.checkpoints.size(), "checkpoint") +
         " (copies of the old home) are deleted. The system disk, settings and "
         "credentials are kept.";
}

inline std::string WipePrompt(const WorkspaceConfig& c) {
  return "Wipe workspace '" + c.name + "'? Its system disk and home are dropped with " +
         CountNoun(c.checkpoints.size(), "checkpoint") +
         "; the next start boots the base image with an empty home, and the workspace "
         "SSH key is regenerated (add the new one where the old was authorised). "
         "Settings and credentials are kept; host folders shared with -v are not "
         "touched.";
}

inline std::string RmPrompt(const WorkspaceConfig& c) {
  return "Delete workspace '" + c.name + "' and everything it owns: system disk, home, " +
         CountNoun(c.checkpoints.size(), "checkpoint") +
         ", secrets file, SSH material, and its MAC reservation? Host folders shared "
         "with -v are not touched.";
}

inline std::string RestorePrompt(const std::string& name, const std::string& id) {
  return "Restore workspace '" + name + "' to checkpoint " + id +
         "? Every change to its system disk and home since is lost.";
}

inline std::string RemoveCheckpointPrompt(const std::string& name, const std::string& id) {
  return "Delete checkpoint " + id + " of workspace '" + name + "'?";
}

}  // namespace cloister::cli
