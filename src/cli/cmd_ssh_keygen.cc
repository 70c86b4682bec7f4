// cloister ssh-keygen NAME: prints the workspace's SSH public key (authorized_keys format), making
// the key first if the workspace has none. --regenerate replaces it (the old key stops working
// wherever it was authorised). The private key stays in the workspace's encrypted secrets file;
// the guest only ever gets signatures from it (sign-only agent, src/sshagent).
#include <filesystem>

#include "cli/cli.h"
#include "cli/commands.h"
#include "sshagent/vault_key_store.h"
#include "store/store.h"

namespace cloister::cli {
namespace {

// TODO(store): switch to the store's workspace lookup and lock once store is on main.
Result<std::string> WorkspaceDir(Cli& cli, const std::string& name) {
  if (name.empty() || name.size() > 64 || name.find('/') != std::string::npos || name[0] == '.') {
    return Error(ErrorCode::kInvalidArgument, "invalid workspace name: " + name);
  }
  std::string ws = cli.StoreRoot() + "/workspaces/" + name;
  std::error_code ec;
  if (!std::filesystem::is_directory(ws, ec)) {
    return Error(ErrorCode::kNotFound, "no workspace named " + name, "see `cloister ls`, or create it first");
  }
  return ws;
}

}  // namespace

void AddSshKeygenCommand(CLI::App& app, Cli& cli) {
  struct Opts {
    std::string name;
    bool regenerate = false, yes = false, json = false;
  };
  auto o = std::make_shared<Opts>();
  auto* cmd = app.add_subcommand(
      "ssh-keygen", "Print the workspace's SSH public key (made on first use; private key stays on the host)");
  cmd->add_option("NAME", o->name, "Workspace name")->required();
  cmd->add_flag("--regenerate", o->regenerate, "Replace the key with a new one");
  cmd->add_flag("-f,--yes", o->yes, "Do not ask before --regenerate");
  cmd->add_flag("--json", o->json, "Print as JSON");
  cmd->callback([&cli, o] {
    auto run = [&]() -> Status {
      ASSIGN_OR_RETURN(std::string dir, WorkspaceDir(cli, o->name));
      sshagent::VaultKeyStore store(
          vault::VaultLocation{cli.StoreRoot() + "/keys", dir + "/" + vault::kSecretsFile, o->name});
      ASSIGN_OR_RETURN(std::string pub, sshagent::PublicKeyPath(dir));
      bool created = false;
      Result<sshagent::Ed25519Key> key = Error(ErrorCode::kInternal, "unset");
      if (o->regenerate) {
        RETURN_IF_ERROR(cli.Confirm("Replace the SSH key of " + o->name +
                                        "? The old key stops working wherever it was authorised.",
                                    o->yes));
        key = sshagent::MakeWorkspaceKey(store, o->name, pub);
        created = true;
        // The running VM's agent holds the key it booted with.
        if (auto st = Store::Open(cli.StoreRoot()); st.ok() && (*st)->State(o->name) == WorkspaceState::kRunning) {
          cli.err() << "cloister: " << o->name << " is running; its agent serves the new key from its next "
                    << "start (`cloister reboot " << o->name << "`)\n";
        }
      } else {
        key = sshagent::LoadOrMakeWorkspaceKey(store, o->name, pub, &created);
      }
      if (!key.ok()) return key.error();
      std::string line = key->AuthorizedKeysLine(sshagent::KeyComment(o->name));
      if (o->json) {
        cli.PrintJson({{"workspace", o->name}, {"public_key", line}, {"fingerprint", key->Fingerprint()},
                       {"created", created}, {"public_key_file", pub}});
      } else {
        if (created) cli.err() << "cloister: made a new SSH key for " << o->name << "\n";
        cli.out() << line << "\n";
      }
      return OkStatus();
    };
    Status st = run();
    if (!st.ok()) cli.Fail(st.error());
  });
}

}  // namespace cloister::cli
