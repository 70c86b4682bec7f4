// What `cloister ssh` and `cloister ssh-config` share: the store's client key, each workspace's
// host key pin, and the OpenSSH block (cli/ssh_config.h) for the running cloister binary.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "base/result.h"
#include "cli/cli.h"
#include "cli/ssh_config.h"
#include "store/store.h"

namespace cloister::cli {

// `--install`'s file at the store root, Included from ~/.ssh/config.
inline constexpr char kSshConfigFile[] = "ssh_config";

struct SshAccess {
  std::vector<SshHostSpec> specs;   // one per name, in order
  std::vector<std::string> blocks;  // SshHostBlock of each
};

// For each of `names` (each must be a workspace of `store`): makes the store's client key if
// there is none (saying so on stderr: running workspaces accept it from their next start), and
// pins the workspace's host key: `repin` (ssh-config) always writes the pin; otherwise (ssh) a
// missing pin is written and a pin naming another key is an error with the ssh-config hint.
Result<SshAccess> PrepareSshAccess(Cli& cli, Store& store, const std::vector<std::string>& names,
                                   bool repin);

}  // namespace cloister::cli
