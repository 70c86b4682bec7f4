#include "supervisor/egress.h"

#include <sys/socket.h>

#include <cstdlib>
#include <utility>

#include "aws/proxy_filter.h"
#include "base/strings.h"
#include "oauth/wiring.h"
#include "proxy/ca.h"
#include "proxy/trace.h"
#include "sshagent/guest_ssh.h"
#include "vault/guest_files.h"
#include "vault/vault.h"

namespace cloister::vm {

proxy::ClientEndReason Egress::EndReason(std::shared_ptr<const channel::StreamEnd> end) {
  if (!end) return nullptr;
  return [end]() -> std::string {
    switch (end->reason()) {
      case channel::StreamEnd::Reason::kReset:
        return proxy::kAbortStreamReset;
      case channel::StreamEnd::Reason::kChannelClosed:
        return proxy::kAbortChannelClosed;
      case channel::StreamEnd::Reason::kNone:
        break;
    }
    return "";
  };
}

std::map<std::string, std::string> ProxyEnvironment() {
  const std::string url = kGuestProxyUrl;
  const std::string no_proxy = "localhost,127.0.0.1,::1";
  return {
      {"HTTPS_PROXY", url},
      {"HTTP_PROXY", url},
      {"https_proxy", url},
      {"http_proxy", url},
      {"ALL_PROXY", url},
      {"all_proxy", url},
      {"NO_PROXY", no_proxy},
      {"no_proxy", no_proxy},
      {"npm_config_proxy", url},
      {"npm_config_https_proxy", url},
      {"PIP_PROXY", url},
      // Every TLS stack at the bundle that holds the proxy CA (Node only adds extra CAs).
      {"NODE_EXTRA_CA_CERTS", kGuestCaFile},
      {"SSL_CERT_FILE", kGuestCaBundle},
      {"REQUESTS_CA_BUNDLE", kGuestCaBundle},
      {"CURL_CA_BUNDLE", kGuestCaBundle},
      {"GIT_SSL_CAINFO", kGuestCaBundle},
      {"npm_config_cafile", kGuestCaBundle},
  };
}

std::map<std::string, std::string> ToolEnvironment(const std::string& tool) {
  if (tool == "claude") {
    return {{"DISABLE_AUTOUPDATER", "1"}, {"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1"}};
  }
  return {};
}

Result<std::map<std::string, std::string>> GuestNpmRegistryFromEnv() {
  const char* r = std::getenv("CLOISTER_GUEST_NPM_REGISTRY");
  return GuestNpmRegistry(r ? r : "");
}

Result<std::map<std::string, std::string>> GuestNpmRegistry(const std::string& value) {
  if (value.empty()) return std::map<std::string, std::string>{};
  std::string url = value;
  bool ok = StartsWith(url, "https://") && url.size() > 8 && url.size() < 512;
  for (char c : url) ok = ok && c > ' ' && c < 0x7f && c != '\'' && c != '"';
  if (!ok) {
    return Error(ErrorCode::kInvalidArgument, "CLOISTER_GUEST_NPM_REGISTRY: bad URL '" + url + "'",
                 "use https://HOST[:PORT]/ or unset it");
  }
  if (url.back() != '/') url += '/';
  return std::map<std::string, std::string>{{"npm_config_registry", url}};
}

Status EgressOverridesFromEnv(EgressOptions& options) {
  if (const char* r = std::getenv("CLOISTER_PROXY_RESOLVE"); r && *r) {
    for (const std::string& item : Split(r, ',')) {
      std::string entry = Trim(item);
      if (entry.empty()) continue;
      size_t eq = entry.find('=');
      if (eq == std::string::npos || eq == 0 || eq + 1 == entry.size() ||
          entry.find(':') > eq || entry.rfind(':') < eq) {
        return Error(ErrorCode::kInvalidArgument,
                     "CLOISTER_PROXY_RESOLVE: bad entry '" + entry + "'",
                     "use host:port=ip:port[,host:port=ip:port...]");
      }
      options.resolve[entry.substr(0, eq)] = entry.substr(eq + 1);
    }
    options.resolve_only = true;
  }
  if (const char* ca = std::getenv("CLOISTER_PROXY_UPSTREAM_CA"); ca && *ca) {
    options.upstream_ca_file = ca;
  }
  return OkStatus();
}

Result<std::unique_ptr<Egress>> Egress::Start(EgressOptions options) {
  std::unique_ptr<Egress> e(new Egress());
  proxy::ProxyConfig cfg;
  cfg.workspace = options.workspace;
  std::vector<vault::BoundCredential> capture_slots;  // login capture (oauth/wiring.h)
  {
    // The vault lives only for this block: Bind() copies what the proxy needs and the Vault's
    // destructor wipes its key material.
    ASSIGN_OR_RETURN(vault::Vault v, vault::Vault::Open(vault::VaultLocation{
                                         options.keys_dir, options.secrets_file, options.workspace},
                                     options.key_backend));
    ASSIGN_OR_RETURN(cfg.credentials, v.Bind());
    ASSIGN_OR_RETURN(capture_slots, v.BindCaptureSlots());
    cfg.llm_body_policy = v.llm_body_policy();
  }
  // Built from placeholders only: BuildGuestCredentials never reads a value.
  vault::GuestCredentials creds = vault::BuildGuestCredentials(cfg.credentials);
  // AWS credentials: a re-signing filter each, and the session token's placeholder registered
  // with the detector (after BuildGuestCredentials: it adds a proxy-only credential entry).
  // (The trace first: AddAwsFilters records minted AWS credentials in it.)
  ASSIGN_OR_RETURN(cfg.trace, proxy::TraceSink::Open(options.trace_log));
  ASSIGN_OR_RETURN(int aws, aws::AddAwsFilters(cfg));
  (void)aws;
  // Subscription logins (oauth/wiring.h): access token swap, host-side refresh saved to this
  // workspace's vault, and the token endpoint guard (always on).
  // A login typed in the guest is captured into this workspace's vault (capture slots).
  vault::VaultLocation vault_at{options.keys_dir, options.secrets_file, options.workspace};
  ASSIGN_OR_RETURN(auto oauth, oauth::AddOauthFilters(
                                   cfg,
                                   oauth::VaultPersister(vault_at, options.key_backend,
                                                         options.config_lock),
                                   std::move(capture_slots),
                                   oauth::VaultPersister(vault_at, options.key_backend,
                                                         options.config_lock, /*create=*/true)));
  ASSIGN_OR_RETURN(cfg.ca, proxy::CertAuthority::LoadOrCreate(options.keys_dir));
  cfg.on_compromise = std::move(options.on_compromise);
  cfg.consent = std::move(options.consent);
  cfg.resolve = std::move(options.resolve);
  cfg.resolve_only = options.resolve_only;
  cfg.upstream_ca_file = std::move(options.upstream_ca_file);

  e->guest_.env = ProxyEnvironment();
  for (auto& [k, v] : creds.env) e->guest_.env[k] = v;
  for (const vault::GuestFile& f : creds.files) {
    e->guest_.files.push_back(
        {options.guest_home + "/" + f.path, f.content, static_cast<unsigned>(f.mode), protocol::kGuestUser});
  }
  // apt ignores the environment under sudo's env_reset: give it its own proxy setting.
  e->guest_.files.push_back({"/etc/apt/apt.conf.d/90cloister-proxy",
                             std::string("Acquire::http::Proxy \"") + kGuestProxyUrl +
                                 "\";\nAcquire::https::Proxy \"" + kGuestProxyUrl + "\";\n",
                             0644, "root"});
  // ssh: the ProxyCommand drop-in (sshagent/guest_ssh.h; the CONNECT client is the guest agent's
  // `ssh-connect`); the proxy lets opaque tunnels through only on the workspace's SSH ports
  // toward its SSH hosts (sshagent/policy.h).
  cfg.tunnel_ports = options.ssh_ports;
  cfg.tunnel_hosts = options.ssh_hosts;
  cfg.egress_policy = options.egress_policy;
  e->guest_.files.push_back({sshagent::kGuestSshConfigPath,
                             sshagent::GuestSshConfig(sshagent::kGuestConnectCommand, kGuestAgentSocket),
                             0644, "root"});
  e->guest_.env["SSH_AUTH_SOCK"] = kGuestAgentSocket;
  e->guest_.ca_pem = cfg.ca->cert_pem();
  std::string ca_pem = cfg.ca->cert_pem();
  ASSIGN_OR_RETURN(e->proxy_, proxy::Proxy::Start(std::move(cfg)));
  // The host-side refresh timer sends its refreshes through this proxy (a socketpair per
  // refresh), so they take the guest's path: custody, vault, trace, egress policy.
  if (!oauth->logins().empty()) {
    proxy::Proxy* p = e->proxy_.get();
    e->refresh_timer_ = std::make_unique<oauth::RefreshTimer>(
        oauth->logins(), oauth::ProxyRefresher(
                             [p]() -> Result<int> {
                               int sv[2];
                               if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
                                 return Error(ErrorCode::kIo, "socketpair for the refresh timer");
                               }
                               p->Serve(sv[0]);
                               return sv[1];
                             },
                             ca_pem));
    e->refresh_timer_->Start();
  }
  return e;
}

Egress::~Egress() { Stop(); }

void Egress::Stop() {
  if (refresh_timer_) refresh_timer_->Stop();
  if (proxy_) proxy_->Stop();
}

}  // namespace cloister::vm
