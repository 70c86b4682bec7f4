// What the guest needs so that `ssh` (and git over SSH) reaches servers through the egress
// proxy: the guest has no route out, so ssh goes through an opaque CONNECT tunnel of the proxy
// (proxy::ProxyConfig::tunnel_ports/tunnel_hosts, from the workspace's SSH policy, policy.h,
// decide which hosts and ports are allowed).
//
// Contract with vm/agent (per boot, on the metadata disk; nothing here is secret):
//   - kGuestSshConfigPath <- GuestSshConfig(kGuestConnectCommand, agent socket): an ssh_config
//     drop-in (Debian's /etc/ssh/ssh_config includes /etc/ssh/ssh_config.d/*.conf) that sets
//     ProxyCommand for every host and points IdentityAgent at the workspace agent socket;
//   - the CONNECT client is the guest agent itself (`cloister-agent ssh-connect HOST PORT`,
//     guest/ssh_connect.h), already on the metadata disk, so it works in images without python3,
//     nc or socat.
#pragma once

#include <cstdint>
#include <string>

#include "protocol/contract.h"

namespace cloister::sshagent {

inline constexpr char kGuestSshConfigPath[] = "/etc/ssh/ssh_config.d/cloister.conf";
// The guest agent on the metadata disk (vm/meta_disk.h mounts it at /run/cloister/meta).
// Spelled from the contract's mount point and agent name (protocol/contract.h).
inline const std::string kGuestConnectCommand =
    std::string(protocol::kMetaMountPoint) + "/" + protocol::kAgentName + " ssh-connect";

// `connect_command`: what ssh runs as `<connect_command> %h %p` (kGuestConnectCommand in the
// guest; tests add --proxy-port). `agent_socket`: the guest's SSH_AUTH_SOCK (empty: leave
// IdentityAgent alone).
std::string GuestSshConfig(const std::string& connect_command, const std::string& agent_socket);

}  // namespace cloister::sshagent
