// Pinning SSH server host keys on first use, for the agent's session binding (agent.h HostBinder).
//
// The guest's ssh binds each agent connection to the host key of the server it is talking to
// (session-bind@openssh.com). The agent then asks Bind(key): which policy host (SshPolicy
// tunnel_hosts) is this key pinned for?
//   - a key pinned for a policy host: that host;
//   - an unknown key: the host side asks each policy host that has no pin yet, on each tunnel
//     port, for its host keys (never trusting the guest's word for which host it reached); the
//     host that presents this key gets all the keys it presented pinned (the first use), and is
//     the answer. Hosts that already have pins are never re-pinned: a changed key is refused until
//     the user runs `cloister ssh-policy NAME --unpin HOST`;
//   - anything else: refused, with the hint that fixes it.
// Scans are serialised, and a host's scan answer is reused for kScanReuse, so a guest that binds
// to key after key of its own making makes the host ask each policy host at most once a window.
// Policy hosts are exact names here: a subdomain the guest reaches through a parent's tunnel scope
// is pinned only once it is added by name (`cloister ssh-policy NAME --add-host ssh.example.com`).
//
// Owned by the supervisor (one per boot); the policy is read and pins written through the
// store's config (Store::UpdateConfig), so `cloister ssh-policy` shows them at once.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"
#include "sshagent/policy.h"

namespace cloister {
class Store;
}

namespace cloister::sshagent {

inline constexpr std::chrono::minutes kScanReuse{5};

// Host key blobs that `host` presents on `port`, as the host (not the guest) sees them.
using HostKeyScanFn = std::function<Result<std::vector<std::string>>(const std::string& host, uint16_t port)>;

struct HostPinnerDeps {
  std::function<Result<SshPolicy>()> load;  // the workspace's policy as stored now
  // Stores a first pin of `key_lines` ("TYPE BASE64") for `host`; must refuse if the host got
  // pins meanwhile or is no longer a policy host (under the config lock).
  std::function<Status(const std::string& host, const std::vector<std::string>& key_lines)> pin;
  HostKeyScanFn scan;
};

class HostKeyPinner {
 public:
  explicit HostKeyPinner(HostPinnerDeps deps) : deps_(std::move(deps)) {}
  // The policy host `key_blob` is pinned for (pinning it on first use), or the refusal.
  Result<std::string> Bind(std::string_view key_blob);
  uint64_t scans() const;

 private:
  struct Scan {
    std::chrono::steady_clock::time_point when;
    std::vector<std::string> blobs;
  };
  HostPinnerDeps deps_;
  mutable std::mutex mu_;  // serialises Bind
  std::map<std::string, Scan> scanned_;  // guarded by mu_
  uint64_t scans_ = 0;                   // guarded by mu_
};

// The deps for workspace `name` of `store`: the policy as stored now (so `--unpin` applies at
// once) restricted to `boot_hosts` (the tunnel hosts the running proxy allows), pins written
// through Store::UpdateConfig, the real ssh-keyscan scan (with the proxy's `resolve` overrides,
// so it asks the host the proxy's tunnel reaches). `store` outlives the pinner.
HostPinnerDeps StoreHostPinnerDeps(Store* store, std::string name, std::vector<std::string> boot_hosts,
                                   std::map<std::string, std::string> resolve = {},
                                   std::function<void(const std::string&)> log = nullptr);

// The real scan: `ssh-keyscan` (openssh-client) toward host:port, or toward `resolve`'s address
// for "host:port" ("addr:port") when it has one (tests). Bounded output, parsed line by line.
// SECURITY: the output is what a network peer sent; every key is parsed with host_key.h.
HostKeyScanFn KeyscanScanner(std::map<std::string, std::string> resolve = {});

// Parses ssh-keyscan output ("host TYPE BASE64" lines; '#' comments) into key blobs.
Result<std::vector<std::string>> ParseKeyscanOutput(std::string_view out);

}  // namespace cloister::sshagent
