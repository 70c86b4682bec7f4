// What the guest needs so that `ssh` (and git over SSH) reaches servers through the egress
// proxy: the guest has no route out, so ssh goes through an opaque CONNECT tunnel of the proxy
// (proxy::ProxyConfig::tunnel_ports/tunnel_hosts decide which hosts and ports are allowed).
//
// Contract with vm/agent (per boot, on the metadata disk; nothing here is secret):
//   - kGuestSshConfigPath  <- GuestSshConfig(): an ssh_config drop-in (Debian's
//     /etc/ssh/ssh_config includes /etc/ssh/ssh_config.d/*.conf) that sets ProxyCommand for every
//     host and points IdentityAgent at the workspace agent socket;
//   - kGuestConnectPath (mode 0755) <- GuestConnectScript(proxy_port): a tiny python3 CONNECT
//     client (the image has python3, not nc/socat) that opens the tunnel and splices stdin/stdout.
#pragma once

#include <cstdint>
#include <string>

namespace cloister::sshagent {

inline constexpr char kGuestSshConfigPath[] = "/etc/ssh/ssh_config.d/cloister.conf";
inline constexpr char kGuestConnectPath[] = "/usr/local/lib/cloister/ssh-connect";

// `connect_path`: where the connect script is (kGuestConnectPath in the guest; tests use a temp
// path). `agent_socket`: the guest's SSH_AUTH_SOCK (empty: leave IdentityAgent alone).
std::string GuestSshConfig(const std::string& connect_path, const std::string& agent_socket);

// A python3 script: `ssh-connect HOST PORT` sends `CONNECT HOST:PORT` to 127.0.0.1:proxy_port,
// requires a 200 answer (otherwise prints the proxy's status line to stderr and exits 1), then
// copies stdin to the tunnel and the tunnel to stdout, half-closing each direction at EOF.
std::string GuestConnectScript(uint16_t proxy_port);

}  // namespace cloister::sshagent
