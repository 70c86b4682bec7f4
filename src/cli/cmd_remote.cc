// `cloister _remote PROTOCOL VERSION -- ARGS...`: the remote end of cli/remote.h. A local cloister
// runs this over SSH; it checks the client's protocol and version, then runs ARGS here.
#include <fstream>
#include <sstream>

#include "cli/cli.h"
#include "cli/commands.h"
#include "cli/remote.h"
#include "cli/ssh_access.h"
#include "sshagent/ide_keys.h"
#include "store/layout.h"
#include "store/store.h"

namespace cloister::cli {
namespace {

Result<std::string> ReadText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Error(ErrorCode::kNotFound, "cannot read " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

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

  // `_ssh-material [--keep-pin] [NAME...]`: what a local `ssh-config` or `ssh` against this host
  // needs, as JSON on stdout (the SSH channel): {"identity": the store's IDE client key (OpenSSH
  // private key), "workspaces": [{"name", "known_hosts": the pin line}]}. The pins are
  // (re)written here as `ssh-config` does; with --keep-pin (a remote `ssh`) as `ssh` does: a
  // missing pin is written, a pin naming another key (after a wipe) is refused. SECURITY: the key only opens the guests' sshd, which only `_ssh-stdio` on
  // this host reaches: its holder already needs SSH access here (docs/threat-model.md).
  auto* mat = app.add_subcommand("_ssh-material", "The remote end of ssh-config over --host (internal)");
  mat->group("");
  auto names = std::make_shared<std::vector<std::string>>();
  auto keep_pin = std::make_shared<bool>(false);
  mat->add_option("NAME", *names);
  mat->add_flag("--keep-pin", *keep_pin);
  mat->callback([&cli, names, keep_pin] {
    auto run = [&]() -> Status {
      ASSIGN_OR_RETURN(std::unique_ptr<Store> store, Store::Open(cli.StoreRoot()));
      std::vector<std::string> list = *names;
      if (list.empty()) {
        ASSIGN_OR_RETURN(auto all, store->List());
        for (const auto& w : all) list.push_back(w.name);
      }
      ASSIGN_OR_RETURN(SshAccess access, PrepareSshAccess(cli, *store, list, /*repin=*/!*keep_pin));
      std::string keys_dir = store->root() + "/" + std::string(layout::kKeysDir);
      ASSIGN_OR_RETURN(std::string identity, ReadText(sshagent::ClientKeyPath(keys_dir)));
      nlohmann::json ws = nlohmann::json::array();
      for (const SshHostSpec& spec : access.specs) {
        ASSIGN_OR_RETURN(std::string pin, ReadText(spec.known_hosts));
        ws.push_back({{"name", spec.name}, {"known_hosts", pin}});
      }
      cli.PrintJson({{"identity", identity}, {"workspaces", ws}});
      return OkStatus();
    };
    if (Status st = run(); !st.ok()) cli.Fail(st.error());
  });
}

}  // namespace cloister::cli
