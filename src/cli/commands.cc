#include "cli/commands.h"

#include "cli/cli.h"

namespace cloister::cli {

void AddAllCommands(CLI::App& app, Cli& cli) {
  AddVersionCommand(app, cli);
  AddSshKeygenCommand(app, cli);
  AddCredCommand(app, cli);
  AddImageCommand(app, cli);
  AddCreateCommand(app, cli);
  AddLsCommand(app, cli);
  AddDescribeCommand(app, cli);
  AddResetCommand(app, cli);
  AddWipeHomeCommand(app, cli);
  AddWipeCommand(app, cli);
  AddRmCommand(app, cli);
  AddCheckpointCommand(app, cli);
  AddForkCommand(app, cli);
  AddGitCommand(app, cli);
  AddDiffCommand(app, cli);
  AddTraceCommand(app, cli);
  AddStartCommand(app, cli);
  AddStopCommand(app, cli);
  AddRebootCommand(app, cli);
  AddSuperviseCommand(app, cli);
  AddExecCommand(app, cli);
  AddAttachCommand(app, cli);
  AddRunCommand(app, cli);
  AddAuditCommand(app, cli);
  AddSshPolicyCommand(app, cli);
  AddSshConfirmCommand(app, cli);
  AddApproveCommand(app, cli);
  AddEgressCommand(app, cli);
  AddConfigCommand(app, cli);
  AddKubeCommand(app, cli);
  AddContextCommand(app, cli);
  AddRemoteCommand(app, cli);
  AddCpCommand(app, cli);
  AddLogsCommand(app, cli);
  AddUiCommand(app, cli);
  AddSshCommand(app, cli);
  AddSshConfigCommand(app, cli);
  AddSshStdioCommand(app, cli);
  AddCompletionCommand(app, cli);
  AddPortCommand(app, cli);
  AddBrowserCommand(app, cli);
}

}  // namespace cloister::cli
