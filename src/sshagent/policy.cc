#include "sshagent/policy.h"

#include <algorithm>
#include <cctype>

#include "base/strings.h"
#include "sshagent/host_key.h"

namespace cloister::sshagent {

using nlohmann::json;

std::vector<std::string> DefaultTunnelHosts() { return {"github.com", "gitlab.com", "bitbucket.org"}; }
std::vector<uint16_t> DefaultTunnelPorts() { return {22}; }

Result<std::string> NormalizeTunnelHost(std::string_view host) {
  std::string h(host);
  for (char& c : h) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (!h.empty() && h.back() == '.') h.pop_back();
  auto bad = [&](const std::string& why) {
    return Error(ErrorCode::kInvalidArgument, "not a host name for SSH tunnels: '" + std::string(host) + "' (" + why + ")",
                 "give a DNS name such as github.com (subdomains are included; no port, no wildcard)");
  };
  if (h.empty() || h.size() > 253) return bad("length");
  size_t label = 0;
  for (size_t i = 0; i < h.size(); ++i) {
    char c = h[i];
    if (c == '.') {
      if (label == 0) return bad("empty label");
      label = 0;
      continue;
    }
    bool ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-';
    if (!ok) return bad(c == '*' ? "wildcards are implicit: a name covers its subdomains" : "character");
    if (c == '-' && (label == 0 || i + 1 == h.size() || h[i + 1] == '.')) return bad("label starts or ends with '-'");
    if (++label > 63) return bad("label longer than 63");
  }
  return h;
}

Status ValidateTunnelPort(int port) {
  if (port < 1 || port > 65535) {
    return Error(ErrorCode::kInvalidArgument, "SSH tunnel port " + std::to_string(port) + " is out of range",
                 "use 1-65535, e.g. 22");
  }
  if (port == 80 || port == 443) {
    return Error(ErrorCode::kInvalidArgument,
                 "port " + std::to_string(port) + " cannot be an SSH tunnel port",
                 "the proxy intercepts HTTP(S) on it; an opaque tunnel there would bypass the "
                 "compromise detector and block every other host's HTTPS");
  }
  return OkStatus();
}

Status ValidateSshPolicy(const SshPolicy& p) {
  if (p.tunnel_hosts.size() > kMaxTunnelHosts) {
    return Error(ErrorCode::kInvalidArgument, "too many SSH tunnel hosts (" +
                 std::to_string(p.tunnel_hosts.size()) + ", at most " + std::to_string(kMaxTunnelHosts) + ")");
  }
  if (p.tunnel_ports.size() > kMaxTunnelPorts) {
    return Error(ErrorCode::kInvalidArgument, "too many SSH tunnel ports (" +
                 std::to_string(p.tunnel_ports.size()) + ", at most " + std::to_string(kMaxTunnelPorts) + ")");
  }
  for (const std::string& h : p.tunnel_hosts) {
    ASSIGN_OR_RETURN(std::string n, NormalizeTunnelHost(h));
    if (n != h) return Error(ErrorCode::kInvalidArgument, "SSH tunnel host '" + h + "' is not normalised");
  }
  for (uint16_t port : p.tunnel_ports) RETURN_IF_ERROR(ValidateTunnelPort(port));
  for (const auto& [host, keys] : p.host_keys) {
    if (std::find(p.tunnel_hosts.begin(), p.tunnel_hosts.end(), host) == p.tunnel_hosts.end()) {
      return Error(ErrorCode::kInvalidArgument, "host key pinned for '" + host + "', which is not an SSH tunnel host");
    }
    if (keys.empty() || keys.size() > kMaxHostKeysPerHost) {
      return Error(ErrorCode::kInvalidArgument, "'" + host + "' has " + std::to_string(keys.size()) +
                   " pinned host keys (1 to " + std::to_string(kMaxHostKeysPerHost) + ")");
    }
    for (const std::string& line : keys) RETURN_IF_ERROR(HostKeyBlobFromLine(line));
  }
  return OkStatus();
}

std::string PinnedHostOf(const SshPolicy& p, std::string_view key_blob) {
  for (const auto& [host, keys] : p.host_keys) {
    for (const std::string& line : keys) {
      auto blob = HostKeyBlobFromLine(line);
      if (blob.ok() && *blob == key_blob) return host;
    }
  }
  return "";
}

json SshPolicyToJson(const SshPolicy& p) {
  json doc = {{"confirm", p.confirm}, {"tunnel_hosts", p.tunnel_hosts}, {"tunnel_ports", p.tunnel_ports}};
  if (!p.host_keys.empty()) doc["host_keys"] = p.host_keys;
  return doc;
}

Result<SshPolicy> SshPolicyFromJson(const json& doc) {
  auto bad = [](const std::string& why) {
    return Error(ErrorCode::kCorrupt, "config.json: \"ssh\" " + why,
                 "fix it with `cloister ssh-policy NAME --reset`");
  };
  if (!doc.is_object()) return bad("is not an object");
  SshPolicy p;
  if (auto it = doc.find("confirm"); it != doc.end()) {
    if (!it->is_boolean()) return bad("confirm is not a boolean");
    p.confirm = it->get<bool>();
  }
  if (auto it = doc.find("tunnel_hosts"); it != doc.end()) {
    if (!it->is_array() || it->size() > kMaxTunnelHosts) return bad("tunnel_hosts is not a list of host names");
    p.tunnel_hosts.clear();
    for (const json& h : *it) {
      if (!h.is_string()) return bad("tunnel_hosts is not a list of host names");
      p.tunnel_hosts.push_back(h.get<std::string>());
    }
  }
  if (auto it = doc.find("tunnel_ports"); it != doc.end()) {
    if (!it->is_array() || it->size() > kMaxTunnelPorts) return bad("tunnel_ports is not a list of ports");
    p.tunnel_ports.clear();
    for (const json& v : *it) {
      if (!v.is_number_integer()) return bad("tunnel_ports is not a list of ports");
      int64_t port = v.get<int64_t>();
      if (port < 1 || port > 65535) return bad("tunnel_ports has " + std::to_string(port));
      p.tunnel_ports.push_back(static_cast<uint16_t>(port));
    }
  }
  if (auto it = doc.find("host_keys"); it != doc.end()) {
    if (!it->is_object() || it->size() > kMaxTunnelHosts) return bad("host_keys is not an object of host key lists");
    for (auto [host, keys] : it->items()) {
      if (!keys.is_array() || keys.size() > kMaxHostKeysPerHost) return bad("host_keys is not an object of host key lists");
      std::vector<std::string>& list = p.host_keys[host];
      for (const json& k : keys) {
        if (!k.is_string()) return bad("host_keys is not an object of host key lists");
        list.push_back(k.get<std::string>());
      }
    }
  }
  if (Status st = ValidateSshPolicy(p); !st.ok()) return bad(st.error().message());
  return p;
}

const ConfigSection<SshPolicy>& SshPolicySection() {
  static const ConfigSection<SshPolicy> section{kSshPolicyConfigKey, SshPolicyFromJson,
                                                SshPolicyToJson, ValidateSshPolicy};
  return section;
}

Result<SshPolicy> SshPolicyFromConfig(const WorkspaceConfig& config) {
  return LoadConfigSection(SshPolicySection(), config);
}

Status PutSshPolicy(WorkspaceConfig& config, const SshPolicy& policy) {
  return PutConfigSection(SshPolicySection(), config, policy);
}

}  // namespace cloister::sshagent
