// A workspace's SSH policy: whether each signature needs the user's confirmation, and where `ssh`
// may go out of the guest (the egress proxy's opaque CONNECT tunnels).
//
// Stored in the workspace's config.json under the top-level key "ssh" (a module-owned key that
// store keeps verbatim, store/config.h):
//   "ssh": {"confirm": false, "tunnel_hosts": ["github.com", ...], "tunnel_ports": [22],
//           "host_keys": {"github.com": ["ssh-ed25519 AAAA...", ...]}}
// An absent key (or an absent field) means the defaults below. Written by `cloister ssh-policy`
// through Store::UpdateConfig; read by the supervisor at every boot (changes apply at the next
// start or reboot). A malformed value is an error: the supervisor refuses to boot rather than
// guess (fail closed).
//
// Host keys (item 10 of issue 15): the agent signs a user-authentication request only inside a
// session bound (session-bind@openssh.com) to a host key pinned here for one of tunnel_hosts.
// Pins are taken on first use (sshagent/host_pins.h: the host side asks the host itself for its
// keys) and written by the supervisor through Store::UpdateConfig; `cloister ssh-policy` shows
// them and `--unpin HOST` forgets them. Every pinned host is one of tunnel_hosts; removing a host
// forgets its pins. "host_keys" is written only when there is a pin.
//
// Tunnels (proxy::ProxyConfig::tunnel_ports/tunnel_hosts): a CONNECT to one of the ports toward
// one of the hosts (exact or subdomain) is spliced byte for byte; a CONNECT to one of the ports
// toward any other host gets 403. The proxy cannot scan an opaque tunnel, so the hosts are the
// user's explicit choice. Ports 80 and 443 are refused: the proxy intercepts them (a tunnel
// there would bypass the compromise detector and cut every other host's HTTPS).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/result.h"
#include "store/config.h"
#include "store/config_section.h"

namespace cloister::sshagent {

inline constexpr char kSshPolicyConfigKey[] = "ssh";
inline constexpr size_t kMaxTunnelHosts = 64;
inline constexpr size_t kMaxTunnelPorts = 16;
inline constexpr size_t kMaxHostKeysPerHost = 8;

std::vector<std::string> DefaultTunnelHosts();  // github.com, gitlab.com, bitbucket.org
std::vector<uint16_t> DefaultTunnelPorts();     // 22

struct SshPolicy {
  bool confirm = false;  // every signature waits for `cloister ssh-confirm NAME` on the host
  std::vector<std::string> tunnel_hosts = DefaultTunnelHosts();
  std::vector<uint16_t> tunnel_ports = DefaultTunnelPorts();
  // host -> its pinned host keys, "TYPE BASE64" (sshagent/host_key.h HostKeyLine).
  std::map<std::string, std::vector<std::string>> host_keys;

  bool operator==(const SshPolicy&) const = default;
};

// A host name for tunnel_hosts: lower-cased, a DNS name (letters, digits, '-', '.'; labels of
// 1-63; at most 253), no wildcard, no port, no IP literal restrictions beyond that.
Result<std::string> NormalizeTunnelHost(std::string_view host);
// 1-65535, not 80 or 443.
Status ValidateTunnelPort(int port);
Status ValidateSshPolicy(const SshPolicy& policy);
// The host whose pins include `key_blob`, or "" when none does.
std::string PinnedHostOf(const SshPolicy& policy, std::string_view key_blob);

nlohmann::json SshPolicyToJson(const SshPolicy& policy);
Result<SshPolicy> SshPolicyFromJson(const nlohmann::json& doc);

// The "ssh" section (store/config_section.h): the shape shared with the egress policy.
const ConfigSection<SshPolicy>& SshPolicySection();

// The workspace's policy (defaults when config.json has no "ssh" key).
Result<SshPolicy> SshPolicyFromConfig(const WorkspaceConfig& config);
// Validates and stores `policy` in config.extra (the caller writes the config).
Status PutSshPolicy(WorkspaceConfig& config, const SshPolicy& policy);

}  // namespace cloister::sshagent
