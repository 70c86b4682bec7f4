// cloister ssh-keygen NAME: prints the workspace's SSH public key (authorized_keys format), making
// the key first if the workspace has none. --regenerate replaces it (the old key stops working
// wherever it was authorised). The private key stays in the workspace's encrypted secrets file;
// the guest only ever gets signatures from it (sign-only agent, src/sshagent).
#include "cli/cli.h"
#include "cli/commands.h"
#include "cli/vault_access.h"
#include "sshagent/vault_key_store.h"
#include "store/store.h"

namespace cloister::cli {

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
      // Making or replacing the key writes the secrets file: hold the workspace's locks.
      ASSIGN_OR_RETURN(VaultAccess access, OpenVaultAccess(cli, o->name, /*mutate=*/true));
      sshagent::VaultKeyStore store(access.location);
      ASSIGN_OR_RETURN(std::string pub, sshagent::PublicKeyPath(access.paths.dir));
      bool created = false;
      Result<sshagent::Ed25519Key> key = Error(ErrorCode::kInternal, "unset");
      if (o->regenerate) {
        RETURN_IF_ERROR(cli.Confirm("Replace the SSH key of " + o->name +
                                        "? The old key stops working wherever it was authorised.",
                                    o->yes));
        key = sshagent::MakeWorkspaceKey(store, o->name, pub);
        created = true;
        // The running VM's agent holds the key it booted with.
        if (access.running) {
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
