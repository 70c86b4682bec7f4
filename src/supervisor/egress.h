// The wire boundary of one running workspace: the supervisor's egress proxy and what the guest
// needs to use it (placeholders, proxy environment, CA). Started once per boot, before the
// metadata disk is built.
//
// SECURITY: the real credential values exist only in this process: in the vault's Bind() result,
// which is moved into the proxy. What goes to the guest (GuestSetup) is built from placeholders
// only (vault::BuildGuestCredentials reads no value), and a test scans the metadata disk for the
// real value.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/result.h"
#include "channel/mux.h"
#include "oauth/refresh_timer.h"
#include "protocol/contract.h"
#include "proxy/consent_filter.h"
#include "proxy/proxy.h"
#include "vault/keys.h"

namespace cloister::vm {

// The guest's end of the proxy: the agent listens here and forwards each connection to the
// supervisor's "proxy" channel service (guest/config.cc default forwards).
// The service names, ports and guest paths are the host-guest contract (protocol/contract.h).
using protocol::kGuestProxyUrl;
using protocol::kProxyService;
// Transparent egress: the guest agent opens one stream of this service per redirected outbound
// TCP connection and writes "<host> <port>\n" first (proxy/transparent.h); the supervisor hands
// it to Egress::ServeTransparent. Same proxy instance as kProxyService.
using protocol::kEgressService;
// Where the guest's CA bundle is (the agent appends the proxy CA to it; guest/agent.h).
inline constexpr char kGuestCaBundle[] = "/etc/ssl/certs/ca-certificates.crt";
inline constexpr char kGuestCaFile[] = "/usr/local/share/ca-certificates/cloister.crt";
using protocol::kGuestProxyPort;  // the port of kGuestProxyUrl
// The guest end of the "ssh-agent" service (guest/config.cc default forwards).
using protocol::kGuestAgentSocket;

// A file the agent writes in the guest at each boot.
struct GuestFileSpec {
  std::string path;  // absolute guest path
  std::string content;
  unsigned mode = 0600;
  std::string owner = protocol::kGuestUser;
};

// What the metadata disk carries for the wire boundary.
struct GuestSetup {
  std::map<std::string, std::string> env;  // proxy variables, CA variables, placeholders
  std::vector<GuestFileSpec> files;        // ~/.git-credentials, gh hosts, apt proxy
  std::string ca_pem;                      // the per-install CA certificate (public)
};

struct EgressOptions {
  std::string workspace;
  std::string keys_dir;      // <store>/keys
  std::string secrets_file;  // <workspace>/secrets.enc
  std::string trace_log;     // <workspace>/trace.jsonl
  // The lock `cloister cred` holds to change the secrets file while the VM runs (the store's
  // config lock); a subscription login's refresh takes it to save the rotated tokens. "" = none.
  std::string config_lock;
  std::string guest_home = protocol::kGuestHome;
  vault::KeyBackend key_backend = vault::KeyBackendFromEnv();  // as `cloister cred` uses it
  // Decides uses of credentials with an ask policy (supervisor/consent.h); null refuses them.
  std::shared_ptr<proxy::ConsentGate> consent;
  // Runs on a proxy thread when a placeholder is caught going out of its scope.
  std::function<void(const proxy::CompromiseEvent&)> on_compromise;
  // Upstream overrides (ProxyConfig::resolve / upstream_ca_file / resolve_only). Empty in normal
  // use; EgressOverridesFromEnv() fills them from the environment for tests and debugging.
  std::map<std::string, std::string> resolve;
  bool resolve_only = false;
  std::string upstream_ca_file;
  // ssh (and git over SSH) leaves through opaque CONNECT tunnels on these ports toward these hosts
  // (exact or subdomain); anything else must be TLS. The supervisor sets them from the
  // workspace's SSH policy (sshagent/policy.h, `cloister ssh-policy`); these are its defaults.
  std::vector<uint16_t> ssh_ports = {22};
  std::vector<std::string> ssh_hosts = {"github.com", "gitlab.com", "bitbucket.org"};
  // Which host:port the guest may reach, in both modes (proxy/policy.h; the supervisor reads it
  // from the workspace's config.json "egress" at every boot). Default: allow all.
  proxy::EgressPolicy egress_policy;
};

// Reads CLOISTER_PROXY_RESOLVE ("host:port=ip:port,..."; its presence also sets resolve_only, so a
// test's traffic can never leave the fakes it names) and CLOISTER_PROXY_UPSTREAM_CA (a PEM file).
// A malformed value is an error: the supervisor refuses to boot rather than guess.
Status EgressOverridesFromEnv(EgressOptions& options);

class Egress {
 public:
  // Opens the vault, binds placeholders, loads (or creates) the per-install CA and starts the
  // proxy. A workspace without credentials still gets the proxy: it is the only way out.
  static Result<std::unique_ptr<Egress>> Start(EgressOptions options);
  ~Egress();

  const GuestSetup& guest() const { return guest_; }
  // Hands one connected guest stream to the proxy (the mux's "proxy" service handler); `end`
  // tells the proxy's trace a reset stream or a closed channel from a client's own close.
  void Serve(int fd, std::shared_ptr<const channel::StreamEnd> end = nullptr) {
    proxy_->Serve(fd, "", EndReason(std::move(end)));
  }
  // Hands one transparent-mode guest stream to the same proxy (the mux's "egress" service).
  void ServeTransparent(int fd, std::shared_ptr<const channel::StreamEnd> end = nullptr) {
    proxy_->ServeTransparent(fd, "", EndReason(std::move(end)));
  }
  // The same for the workspace's browser VM (supervisor/browser_vm.h): the same proxy, with every
  // trace record of the stream marked `"source": source`.
  void Serve(int fd, const std::string& source,
             std::shared_ptr<const channel::StreamEnd> end = nullptr) {
    proxy_->Serve(fd, source, EndReason(std::move(end)));
  }
  void ServeTransparent(int fd, const std::string& source,
                        std::shared_ptr<const channel::StreamEnd> end = nullptr) {
    proxy_->ServeTransparent(fd, source, EndReason(std::move(end)));
  }
  // What the proxy's trace says of a guest stream that ended under a request (proxy.h
  // ClientEndReason): stream_reset, channel_closed, or nothing known. Null `end`: nothing.
  static proxy::ClientEndReason EndReason(std::shared_ptr<const channel::StreamEnd> end);
  bool compromised() const { return proxy_->compromised(); }
  void Stop();

 private:
  Egress() = default;
  std::unique_ptr<proxy::Proxy> proxy_;
  // The host-side refresh of the workspace's subscription logins (oauth/refresh_timer.h):
  // stopped before the proxy. Null without a login or capture slot.
  std::unique_ptr<oauth::RefreshTimer> refresh_timer_;
  GuestSetup guest_;
};

// The guest environment that points every common tool at the proxy and the CA (pure; tested).
std::map<std::string, std::string> ProxyEnvironment();

// The guest environment a coding agent gets besides its placeholder key (pure; tested): Claude
// Code neither updates itself (the install is pinned, base/agent_tools.h) nor sends telemetry or
// error reports, so its only traffic is its API.
std::map<std::string, std::string> ToolEnvironment(const std::string& tool);

// npm's registry in the guest: npm's own default unless CLOISTER_GUEST_NPM_REGISTRY names an
// https:// URL (tests point it at a made-up name that CLOISTER_PROXY_RESOLVE maps to a local fake
// registry). Returns the variables to add ({} normally); a malformed value is an error.
Result<std::map<std::string, std::string>> GuestNpmRegistryFromEnv();
// The same from the variable's value ("" = unset; pure).
Result<std::map<std::string, std::string>> GuestNpmRegistry(const std::string& value);

}  // namespace cloister::vm
