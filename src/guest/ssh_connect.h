// `cloister-agent ssh-connect [--proxy-port N] HOST PORT`: ssh's ProxyCommand in the guest.
//
// The guest has no route out; ssh reaches servers through an opaque CONNECT tunnel of the
// egress proxy (the agent's forward of 127.0.0.1:3128 to the host's "proxy" service), which
// allows only the workspace's SSH hosts and ports (sshagent/policy.h). This sends
// `CONNECT HOST:PORT`, requires a 200 answer (otherwise it prints the proxy's status line and
// reason on stderr, with the hint where the policy is changed, and exits 1), then copies stdin to
// the tunnel and the tunnel to stdout, half-closing each direction at EOF.
//
// Part of the static agent so it works in every image (the test image has no python3, nc or
// socat). sshagent::GuestSshConfig() writes the ProxyCommand line that runs it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "protocol/contract.h"

namespace cloister::guest {

inline constexpr uint16_t kDefaultSshConnectProxyPort = protocol::kGuestProxyPort;

// `args` are the words after "ssh-connect". Returns the process exit code; `in_fd`/`out_fd`/
// `err_fd` are ssh's pipes (0, 1, 2 in the real command).
int RunSshConnect(const std::vector<std::string>& args, int in_fd = 0, int out_fd = 1, int err_fd = 2);

}  // namespace cloister::guest
