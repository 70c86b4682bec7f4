// The list of verbs. Each Add*Command lives in its own cmd_*.cc file.
#pragma once

#include <CLI/CLI.hpp>

namespace cloister::cli {

class Cli;

void AddVersionCommand(CLI::App& app, Cli& cli);
void AddSshKeygenCommand(CLI::App& app, Cli& cli);
void AddCredCommand(CLI::App& app, Cli& cli);
void AddImageCommand(CLI::App& app, Cli& cli);
void AddCreateCommand(CLI::App& app, Cli& cli);
void AddLsCommand(CLI::App& app, Cli& cli);
void AddDescribeCommand(CLI::App& app, Cli& cli);
void AddResetCommand(CLI::App& app, Cli& cli);
void AddWipeHomeCommand(CLI::App& app, Cli& cli);
void AddWipeCommand(CLI::App& app, Cli& cli);
void AddRmCommand(CLI::App& app, Cli& cli);
void AddCheckpointCommand(CLI::App& app, Cli& cli);
void AddForkCommand(CLI::App& app, Cli& cli);
void AddGitCommand(CLI::App& app, Cli& cli);
void AddDiffCommand(CLI::App& app, Cli& cli);
void AddTraceCommand(CLI::App& app, Cli& cli);
void AddStartCommand(CLI::App& app, Cli& cli);
void AddStopCommand(CLI::App& app, Cli& cli);
void AddRebootCommand(CLI::App& app, Cli& cli);
void AddSuperviseCommand(CLI::App& app, Cli& cli);
void AddExecCommand(CLI::App& app, Cli& cli);
void AddAttachCommand(CLI::App& app, Cli& cli);
void AddRunCommand(CLI::App& app, Cli& cli);
void AddAuditCommand(CLI::App& app, Cli& cli);
void AddSshPolicyCommand(CLI::App& app, Cli& cli);
void AddSshConfirmCommand(CLI::App& app, Cli& cli);
void AddApproveCommand(CLI::App& app, Cli& cli);
void AddEgressCommand(CLI::App& app, Cli& cli);
void AddConfigCommand(CLI::App& app, Cli& cli);
void AddKubeCommand(CLI::App& app, Cli& cli);
void AddContextCommand(CLI::App& app, Cli& cli);
void AddRemoteCommand(CLI::App& app, Cli& cli);
void AddCpCommand(CLI::App& app, Cli& cli);
void AddLogsCommand(CLI::App& app, Cli& cli);
void AddUiCommand(CLI::App& app, Cli& cli);
void AddSshCommand(CLI::App& app, Cli& cli);
void AddSshStdioCommand(CLI::App& app, Cli& cli);
void AddSshConfigCommand(CLI::App& app, Cli& cli);
// Last: it walks the tree the others built (and adds the hidden `_complete-names`).
void AddCompletionCommand(CLI::App& app, Cli& cli);
void AddPortCommand(CLI::App& app, Cli& cli);
void AddBrowserCommand(CLI::App& app, Cli& cli);

// Registers every verb above on `app`.
void AddAllCommands(CLI::App& app, Cli& cli);

}  // namespace cloister::cli
