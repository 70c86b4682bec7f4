#include "sshagent/host_pins.h"

#include <algorithm>
#include <charconv>

#include "base/strings.h"
#include "base/subprocess.h"
#include "sshagent/host_key.h"
#include "store/store.h"

namespace cloister::sshagent {

uint64_t HostKeyPinner::scans() const {
  std::lock_guard<std::mutex> lock(mu_);
  return scans_;
}

Result<std::string> HostKeyPinner::Bind(std::string_view key_blob) {
  std::lock_guard<std::mutex> lock(mu_);
  ASSIGN_OR_RETURN(SshPolicy policy, deps_.load());
  std::string host = PinnedHostOf(policy, key_blob);
  if (!host.empty()) return host;
  const std::string fp = HostKeyFingerprint(key_blob);
  std::vector<std::string> problems;
  for (const std::string& h : policy.tunnel_hosts) {
    if (policy.host_keys.count(h) != 0) continue;  // pinned hosts are never re-pinned here
    auto it = scanned_.find(h);
    if (it == scanned_.end() || std::chrono::steady_clock::now() - it->second.when > kScanReuse) {
      Scan scan{std::chrono::steady_clock::now(), {}};
      for (uint16_t port : policy.tunnel_ports) {
        ++scans_;
        auto blobs = deps_.scan(h, port);
        if (!blobs.ok()) {
          problems.push_back(h + ":" + std::to_string(port) + ": " + blobs.error().message());
          continue;
        }
        for (std::string& b : *blobs) {
          if (std::find(scan.blobs.begin(), scan.blobs.end(), b) == scan.blobs.end()) {
            scan.blobs.push_back(std::move(b));
          }
        }
      }
      it = scanned_.insert_or_assign(h, std::move(scan)).first;
    }
    const std::vector<std::string>& blobs = it->second.blobs;
    if (std::find(blobs.begin(), blobs.end(), key_blob) == blobs.end()) continue;
    std::vector<std::string> lines;
    for (const std::string& b : blobs) {
      auto line = HostKeyLine(b);
      if (line.ok() && lines.size() < kMaxHostKeysPerHost) lines.push_back(*line);
    }
    RETURN_IF_ERROR(deps_.pin(h, lines));
    return h;
  }
  std::string why = "SSH host key " + fp + " is not pinned for any SSH host of this workspace";
  if (!problems.empty()) why += " (could not ask: " + Join(problems, "; ") + ")";
  return Error(ErrorCode::kPermissionDenied, why,
               "see the pins with `cloister ssh-policy NAME`; a new host: `--add-host HOST`; a "
               "host whose key really changed: `--unpin HOST`");
}

HostPinnerDeps StoreHostPinnerDeps(Store* store, std::string name, std::vector<std::string> boot_hosts,
                                   std::map<std::string, std::string> resolve,
                                   std::function<void(const std::string&)> log) {
  HostPinnerDeps d;
  d.load = [store, name, boot_hosts]() -> Result<SshPolicy> {
    ASSIGN_OR_RETURN(WorkspaceConfig config, store->LoadConfig(name));
    ASSIGN_OR_RETURN(SshPolicy p, SshPolicyFromConfig(config));
    std::vector<std::string> hosts;
    for (const std::string& h : p.tunnel_hosts) {
      if (std::find(boot_hosts.begin(), boot_hosts.end(), h) != boot_hosts.end()) hosts.push_back(h);
    }
    p.tunnel_hosts = std::move(hosts);
    for (auto it = p.host_keys.begin(); it != p.host_keys.end();) {
      it = std::find(p.tunnel_hosts.begin(), p.tunnel_hosts.end(), it->first) == p.tunnel_hosts.end()
               ? p.host_keys.erase(it)
               : std::next(it);
    }
    return p;
  };
  d.pin = [store, name, log](const std::string& host, const std::vector<std::string>& lines) -> Status {
    RETURN_IF_ERROR(store->UpdateConfig(name, [&](WorkspaceConfig& c) -> Status {
      ASSIGN_OR_RETURN(SshPolicy p, SshPolicyFromConfig(c));
      if (std::find(p.tunnel_hosts.begin(), p.tunnel_hosts.end(), host) == p.tunnel_hosts.end()) {
        return Error(ErrorCode::kFailedPrecondition, host + " is no longer an SSH host of " + name);
      }
      if (p.host_keys.count(host) != 0) {
        return Error(ErrorCode::kAlreadyExists, host + " got pinned host keys meanwhile");
      }
      p.host_keys[host] = lines;
      return PutSshPolicy(c, p);
    }));
    if (log) {
      std::vector<std::string> fps;
      for (const std::string& l : lines) fps.push_back(HostKeyFingerprint(*HostKeyBlobFromLine(l)));
      log("ssh: pinned the host keys of " + host + " on first use: " + Join(fps, ", "));
    }
    return OkStatus();
  };
  d.scan = KeyscanScanner(std::move(resolve));
  return d;
}

Result<std::vector<std::string>> ParseKeyscanOutput(std::string_view out) {
  // SECURITY: network bytes; bounded, and every key goes through HostKeyBlobFromLine.
  if (out.size() > 256 * 1024) return Error(ErrorCode::kCorrupt, "ssh-keyscan: output too long");
  std::vector<std::string> blobs;
  for (const std::string& raw : Split(std::string(out), '\n')) {
    std::string line = Trim(raw);
    if (line.empty() || line[0] == '#') continue;
    std::vector<std::string> f = Split(line, ' ');
    if (f.size() < 3) continue;
    auto blob = HostKeyBlobFromLine(f[1] + " " + f[2]);
    if (!blob.ok()) continue;  // a type we do not support (certificates, sk-*)
    if (std::find(blobs.begin(), blobs.end(), *blob) == blobs.end()) blobs.push_back(*blob);
    if (blobs.size() > kMaxHostKeysPerHost) return Error(ErrorCode::kCorrupt, "ssh-keyscan: too many keys");
  }
  return blobs;
}

HostKeyScanFn KeyscanScanner(std::map<std::string, std::string> resolve) {
  return [resolve = std::move(resolve)](const std::string& host, uint16_t port) -> Result<std::vector<std::string>> {
    std::string target = host;
    uint16_t target_port = port;
    if (auto it = resolve.find(host + ":" + std::to_string(port)); it != resolve.end()) {
      size_t colon = it->second.rfind(':');
      unsigned parsed = 0;
      std::string_view digits = colon == std::string::npos ? "" : std::string_view(it->second).substr(colon + 1);
      auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), parsed);
      if (digits.empty() || ec != std::errc() || end != digits.data() + digits.size() || parsed == 0 ||
          parsed > 65535) {
        return Error(ErrorCode::kInvalidArgument, "bad resolve override '" + it->second + "'");
      }
      target = it->second.substr(0, colon);
      target_port = static_cast<uint16_t>(parsed);
    }
    RunOptions opts;
    opts.timeout = std::chrono::seconds(20);
    // -T bounds each connection; "--" so a host can never be read as an option.
    auto run = RunProcess({"ssh-keyscan", "-T", "5", "-p", std::to_string(target_port), "-t",
                           "ed25519,ecdsa,rsa", "--", target},
                          opts);
    if (!run.ok()) {
      return Error(run.error().code(), "cannot ask " + host + " for its SSH host keys: " + run.error().message(),
                   "install ssh-keyscan (Debian: openssh-client)");
    }
    ASSIGN_OR_RETURN(std::vector<std::string> blobs, ParseKeyscanOutput(run->out));
    if (blobs.empty()) return Error(ErrorCode::kUnavailable, "no host key answered");
    return blobs;
  };
}

}  // namespace cloister::sshagent
