// The OpenSSH client configuration of IDE access (`cloister ssh-config`, `cloister ssh`): one
// `Host NAME.cloister` block per workspace whose ProxyCommand is `cloister _ssh-stdio NAME` (a
// channel stream to the guest's `sshd` service, guest/sshd.h), with the store's client key and
// the workspace's pinned host key (sshagent/ide_keys.h). Pure text functions, plus the
// idempotent `Include` in ~/.ssh/config that `--install` adds.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "base/result.h"

namespace cloister::cli {

struct SshHostSpec {
  std::string name;          // workspace
  std::string cloister;      // absolute path of the cloister binary
  std::string store_root;    // "" = the default store (no --store in the ProxyCommand)
  std::string identity;      // <store>/keys/ssh-client
  std::string known_hosts;   // <store>/workspaces/NAME/ssh/known_hosts (the pin)
  // Non-empty: the ProxyCommand is these words instead (a remote host's ssh, cli/remote.h).
  std::vector<std::string> proxy_argv;
};

// The block's options in order, as (keyword, value) with values already quoted for ssh_config
// (and, for ProxyCommand, for /bin/sh). Paths holding a double quote, a newline or a NUL cannot
// be written safely and are an error.
Result<std::vector<std::pair<std::string, std::string>>> SshHostOptions(const SshHostSpec& spec);

// "# cloister workspace NAME ...\nHost NAME.cloister\n  User dev\n  ..." (ends with a newline).
Result<std::string> SshHostBlock(const SshHostSpec& spec);

// The workspace names of the blocks in a file SshHostBlock wrote ("Host NAME.cloister" lines).
std::vector<std::string> SshConfigHosts(const std::string& text);

// The `Include` line for `path` (quoted).
std::string SshIncludeLine(const std::string& path);

// ~/.ssh/config with `include` as its first line: unchanged if the line is already there (any
// position), else the line and a comment put before everything (an Include after a `Host` line
// would only apply inside that block). Returns the new text and whether it changed.
std::pair<std::string, bool> WithSshInclude(const std::string& config, const std::string& include);

// Adds the Include for `path` to `ssh_config` (e.g. ~/.ssh/config, created 0600 with its
// directory 0700 if absent): atomic, keeps the file's mode, follows a symlinked config to its
// target. Returns whether the file changed.
Result<bool> InstallSshInclude(const std::string& ssh_config, const std::string& path);

}  // namespace cloister::cli
