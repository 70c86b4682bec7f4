// `cloister ssh-config [NAME...] [--install]`: prints an OpenSSH client block per workspace (all
// of them without NAMEs), `Host NAME.cloister`, whose ProxyCommand is `cloister _ssh-stdio NAME`
// (cli/ssh_config.h), and pins each workspace's current sshd host key in its known_hosts file
// (sshagent/ide_keys.h): after `wipe` ssh refuses the new key until this is run again.
// `--install` writes the blocks into <store>/ssh_config and adds one `Include` of it at the top of
// ~/.ssh/config (idempotent, atomic, the file's mode kept), which VS Code Remote-SSH and
// JetBrains Gateway read.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "base/file_util.h"
#include "cli/cli.h"
#include "cli/commands.h"
#include "cli/ssh_config.h"
#include "cli/ssh_access.h"
#include "sshagent/ide_keys.h"
#include "store/store.h"

namespace cloister::cli {

void AddSshConfigCommand(CLI::App& app, Cli& cli) {
  struct Opts {
    std::vector<std::string> names;
    bool install = false;
  };
  auto o = std::make_shared<Opts>();
  auto* cmd = app.add_subcommand(
      "ssh-config", "Print the OpenSSH config of workspaces (Host NAME.cloister), for ssh and IDEs");
  cmd->add_option("NAME", o->names, "Workspaces (default: every workspace of the store)");
  cmd->add_flag("--install", o->install,
                "Write the blocks to <store>/ssh_config and Include it from ~/.ssh/config");
  cmd->footer(
      "Each block logs in as dev through `cloister _ssh-stdio NAME` (a channel stream to the "
      "guest's sshd; the guest listens on no port) with the store's client key (keys/ssh-client) "
      "and the workspace's host key, which this command pins in workspaces/NAME/ssh/known_hosts. "
      "After `cloister wipe NAME` ssh refuses the workspace's new host key until ssh-config is "
      "run again. The user's own ssh-agent is never forwarded (ForwardAgent no; the guest's sshd "
      "refuses it and gives sessions the workspace's sign-only agent).\n"
      "VS Code: `cloister ssh-config --install`, then Remote-SSH: Connect to Host... NAME.cloister.");
  cmd->callback([&cli, o] {
    auto run = [&]() -> Status {
      ASSIGN_OR_RETURN(std::unique_ptr<Store> store, Store::Open(cli.StoreRoot()));
      std::vector<std::string> names = o->names;
      if (names.empty()) {
        ASSIGN_OR_RETURN(auto all, store->List());
        for (const auto& w : all) names.push_back(w.name);
      }
      std::string install_path = store->root() + "/" + kSshConfigFile;
      if (o->install) {
        // Blocks installed before for workspaces that still exist stay in the file.
        std::ifstream in(install_path);
        std::stringstream ss;
        ss << in.rdbuf();
        std::set<std::string> have(names.begin(), names.end());
        for (const std::string& n : SshConfigHosts(ss.str())) {
          if (have.count(n)) continue;
          if (!store->LoadConfig(n).ok()) continue;  // removed since: its block goes
          names.push_back(n);
          have.insert(n);
        }
      }
      ASSIGN_OR_RETURN(SshAccess access, PrepareSshAccess(cli, *store, names, /*repin=*/true));
      std::string text;
      for (const auto& block : access.blocks) text += block + "\n";
      if (!o->install) {
        cli.out() << text;
        return OkStatus();
      }
      RETURN_IF_ERROR(WriteFileAtomic(
          install_path,
          "# Written by `cloister ssh-config --install`; rewritten by each run.\n\n" + text, 0644));
      const char* home = std::getenv("HOME");
      if (!home || !*home) {
        return Error(ErrorCode::kFailedPrecondition, "HOME is not set: no ~/.ssh/config to add to",
                     "add `" + SshIncludeLine(install_path) + "` to your ssh config yourself");
      }
      std::string user_config = std::string(home) + "/.ssh/config";
      ASSIGN_OR_RETURN(bool changed, InstallSshInclude(user_config, install_path));
      cli.out() << "cloister: wrote " << access.blocks.size() << " host"
                << (access.blocks.size() == 1 ? "" : "s") << " to " << install_path << "\n";
      cli.out() << "cloister: " << user_config
                << (changed ? " now includes it (first line)" : " already includes it") << "\n";
      for (const std::string& n : names) {
        cli.out() << "  ssh " << n << sshagent::kSshHostSuffix << "\n";
      }
      return OkStatus();
    };
    Status st = run();
    if (!st.ok()) cli.Fail(st.error());
  });
}

}  // namespace cloister::cli
