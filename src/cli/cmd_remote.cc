// `cloister _remote PROTOCOL VERSION -- ARGS...`: the remote end of cli/remote.h. A local cloister
// runs this over SSH; it checks the client's protocol and version, then runs ARGS here.
#include "cli/cli.h"
#include "cli/commands.h"
#include "cli/remote.h"

namespace cloister::cli {

void AddRemoteCommand(CLI::App& app, Cli& cli) {
  auto* cmd = app.add_subcommand("_remote", "The remote end of --host (internal)");
  cmd->group("");  // hidden from --help
  auto protocol = std::make_shared<std::string>();
  auto version = std::make_shared<std::string>();
  cmd->add_option("PROTOCOL", *protocol)->required();
  cmd->add_option("VERSION", *version)->required();
  cmd->callback([&cli, protocol, version] {
    if (Status st = CheckRemoteClient(*protocol, *version); !st.ok()) {
      cli.Fail(st.error());
      return;
    }
    if (!cli.after_dashes || cli.after_dashes->empty()) {
      cli.Fail(Error(ErrorCode::kInvalidArgument, "_remote: no command after --"));
      return;
    }
    std::vector<std::string> words = {"cloister"};
    words.insert(words.end(), cli.after_dashes->begin(), cli.after_dashes->end());
    std::vector<const char*> argv;
    for (const std::string& w : words) argv.push_back(w.c_str());
    argv.push_back(nullptr);
    cli.exit_code = RunCli(static_cast<int>(words.size()), argv.data(), cli.out(), cli.err(), cli.in());
  });
}

}  // namespace cloister::cli
