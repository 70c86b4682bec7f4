// The guest side of IDE access over SSH: the channel service `sshd` (protocol::kSshdService,
// opened by the host's `cloister _ssh-stdio NAME`, the ProxyCommand that `cloister ssh-config`
// writes). Each stream runs OpenSSH's `sshd -i` (inetd mode) on the stream's fd, so the guest
// opens no port: the only way in is a stream the host opened.
//
// What sshd gets, all from the host at boot (metadata disk `files`, written by the agent as root
// into protocol::kGuestSshdDir): the workspace's host key (0600) and one authorized_keys line,
// the store's client PUBLIC key with `restrict,pty,port-forwarding`. The agent writes sshd_config
// (SshdConfigText): public key authentication only, for the workspace user only, no agent,
// remote (-R), stream-local, X11 or tunnel forwarding; local forwarding (-L/-D/-W) only to the
// guest's own loopback, which IDEs need to reach their server in the guest; internal sftp; and
// SSH_AUTH_SOCK set to the workspace's sign-only agent socket, so the user's host agent is never
// what a session sees (`ssh -A` gets a refusal, not a forward).
//
// Fail closed: without the host key or the authorized key (a host that gave none, an image
// without sshd), a stream is closed at once and the console says why.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <string_view>

#include "base/result.h"
#include "protocol/contract.h"

namespace cloister::guest {

struct SshdOptions {
  std::string sshd = "/usr/sbin/sshd";
  std::string dir = protocol::kGuestSshdDir;  // host key, authorized_keys, sshd_config, log
  std::string host_key = protocol::kGuestSshdHostKey;
  std::string authorized_keys = protocol::kGuestSshdAuthorizedKeys;
  std::string privsep_dir = "/run/sshd";  // Debian's sshd privilege separation directory
  std::string user = protocol::kGuestUser;  // the only user allowed in (AllowUsers)
  // Host tests run sshd as root for root: `PermitRootLogin prohibit-password` then. Never set by
  // the agent (the workspace user is dev).
  bool permit_root = false;
  // Set in every session (SetEnv): the per-boot environment (proxy, CA, placeholders) and
  // SSH_AUTH_SOCK (the workspace's agent). Entries sshd_config cannot carry verbatim are left out
  // (and logged).
  std::map<std::string, std::string> env;
  std::string agent_socket = protocol::kGuestAgentSocket;  // SSH_AUTH_SOCK in every session
  std::function<void(std::string_view)> log;
};

// The sshd_config text for `o` (pure). `skipped` receives env names left out.
std::string SshdConfigText(const SshdOptions& o, std::vector<std::string>* skipped = nullptr);

// Checks the host key and authorized_keys are there (regular files, owned by root), writes
// sshd_config into o.dir and makes the privilege separation directory. Error names what is
// missing.
Status PrepareSshd(const SshdOptions& o);

// Serves one stream: runs `sshd -i -f DIR/sshd_config -E DIR/sshd.log` with the stream as its
// stdin and stdout, waits for it and closes `fd`. Blocks: run it on a thread of its own.
void ServeSshd(int fd, const SshdOptions& o);

}  // namespace cloister::guest
