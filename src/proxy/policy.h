// A workspace's egress policy: which host:port the guest may reach through the egress proxy, in
// proxy mode (CONNECT, absolute-form HTTP) and transparent mode (the "egress" service) alike.
//
// Stored in the workspace's config.json under the top-level key "egress" (a module-owned key that
// store keeps verbatim, store/config.h):
//   "egress": {"allow_all": true, "allow": ["api.example.com", "*.example.org:443", "db.lan:5432"]}
// An absent key (or field) means the defaults: allow all, no entries. Written by
// `cloister egress NAME` through Store::UpdateConfig; read by the supervisor at every boot (a
// change applies at the next start or reboot). A malformed value refuses the boot (fail closed).
//
// Entries ("rules"): `host` (exactly that name) or `*.suffix` (every name below suffix, not
// suffix itself) or a dotted IPv4 literal, optionally `:port` (without: any port).
//   - allow_all false: only destinations matching an entry are reached; everything else is
//     refused (proxy mode: 403; transparent mode: the stream is closed) and traced with the reason.
//   - An entry with an explicit port other than 80 and 443 also allows an opaque tunnel there: bytes
//     that are neither TLS nor HTTP (databases, SSH, server-speaks-first protocols) are spliced to
//     the upstream unread. Ports 80 and 443 never get opaque tunnels (the proxy intercepts them).
//     TLS and HTTP are intercepted on every port, whatever the policy.
// The SSH policy's tunnels (sshagent/policy.h) are opaque tunnels too, but still need the egress
// policy to allow their destination.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/result.h"
#include "store/config.h"
#include "store/config_section.h"

namespace cloister::proxy {

inline constexpr char kEgressPolicyConfigKey[] = "egress";
inline constexpr size_t kMaxEgressRules = 256;

struct EgressRule {
  std::string host;   // "example.com", "*.example.com" or "10.0.0.5"; lower-case, no trailing dot
  uint16_t port = 0;  // 0: any port
  bool Matches(std::string_view host, uint16_t port) const;
  std::string ToString() const;  // "host" or "host:port"
  bool operator==(const EgressRule&) const = default;
};

struct EgressPolicy {
  bool allow_all = true;
  std::vector<EgressRule> allow;

  // May the guest reach host:port at all? `host` as the proxy normalises it (lower-case, no
  // trailing dot).
  bool Allows(std::string_view host, uint16_t port) const;
  // May bytes that are neither TLS nor HTTP go to host:port unread? Only through an entry naming
  // that port explicitly, never on 80/443.
  bool AllowsOpaque(std::string_view host, uint16_t port) const;
  bool operator==(const EgressPolicy&) const = default;
};

// "host[:port]" as a user writes it (case-insensitive, a trailing dot is dropped).
Result<EgressRule> ParseEgressRule(std::string_view text);
Status ValidateEgressPolicy(const EgressPolicy& policy);

nlohmann::json EgressPolicyToJson(const EgressPolicy& policy);
Result<EgressPolicy> EgressPolicyFromJson(const nlohmann::json& doc);

// The "egress" section (store/config_section.h): the shape shared with the SSH policy.
const ConfigSection<EgressPolicy>& EgressPolicySection();

// The workspace's policy (defaults when config.json has no "egress" key).
Result<EgressPolicy> EgressPolicyFromConfig(const WorkspaceConfig& config);
// Validates and stores `policy` in config.extra (the caller writes the config).
Status PutEgressPolicy(WorkspaceConfig& config, const EgressPolicy& policy);

}  // namespace cloister::proxy
