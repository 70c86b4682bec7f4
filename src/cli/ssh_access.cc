#include "cli/ssh_access.h"

#include <cstdlib>
#include <filesystem>

#include "sshagent/ide_keys.h"
#include "store/layout.h"
#include "supervisor/launcher.h"

namespace cloister::cli {

Result<SshAccess> PrepareSshAccess(Cli& cli, Store& store, const std::vector<std::string>& names,
                                   bool repin) {
  std::string keys_dir = store.root() + "/" + std::string(layout::kKeysDir);
  for (const std::string& n : names) {
    auto c = store.LoadConfig(n);
    if (!c.ok()) return c.error();
  }
  bool created = false;
  ASSIGN_OR_RETURN(sshagent::Ed25519Key client, sshagent::LoadOrMakeClientKey(keys_dir, &created));
  (void)client;
  if (created) {
    cli.err() << "cloister: made the store's SSH client key " << sshagent::ClientKeyPath(keys_dir)
              << "; a workspace already running accepts it from its next start (`cloister reboot "
                 "NAME`)\n";
  }
  ASSIGN_OR_RETURN(std::string exe, vm::CloisterExecutable());
  std::error_code ec;
  std::string abs = std::filesystem::absolute(exe, ec).lexically_normal().string();
  if (!ec) exe = abs;
  // The ProxyCommand names the store when this one is not the default one.
  const char* home_env = std::getenv("CLOISTER_HOME");
  bool explicit_store = !cli.store_flag().empty() || (home_env && *home_env);
  SshAccess access;
  for (const std::string& n : names) {
    std::string dir = store.Paths(n).dir;
    if (repin) {
      RETURN_IF_ERROR(sshagent::PinSshdHostKey(n, dir));
    } else {
      Status pinned = sshagent::CheckSshdHostPin(n, dir);
      if (!pinned.ok() && pinned.error().code() == ErrorCode::kNotFound) {
        RETURN_IF_ERROR(sshagent::PinSshdHostKey(n, dir));  // first use
      } else if (!pinned.ok()) {
        return pinned.error();
      }
    }
    SshHostSpec spec;
    spec.name = n;
    spec.cloister = exe;
    spec.store_root = explicit_store ? store.root() : "";
    spec.identity = sshagent::ClientKeyPath(keys_dir);
    spec.known_hosts = sshagent::KnownHostsPath(dir);
    ASSIGN_OR_RETURN(std::string block, SshHostBlock(spec));
    access.specs.push_back(spec);
    access.blocks.push_back(block);
  }
  return access;
}

}  // namespace cloister::cli
