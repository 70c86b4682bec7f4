// The per-boot metadata disk (vdc): a small read-only ext4 image labelled CLOISTER-META, made on
// the host at every boot with `mkfs.ext4 -d`. Its root holds the static guest agent
// (`cloister-agent`, 0755) and `config.json` (schema v1, agreed in notes/agent-vm.md and
// docs/design.md), and later the CA certificate and placeholder files.
//
// The base image's boot hook mounts it and execs the agent, so the base image stays identical on
// every install while per-workspace facts change per boot.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/result.h"
#include "protocol/contract.h"

namespace cloister::vm {

using protocol::kMetaLabel;  // the host-guest contract (protocol/contract.h)
inline constexpr const char* kMetaAgentName = protocol::kAgentName;
using protocol::kMetaConfigName;
// config.json's "transparent" object (guest/transparent.h): the host channel service the agent
// sends redirected connections to (the supervisor serves it: Egress::ServeTransparent), the
// guest port of the agent's redirect listener and of its DNS. Always written: transparent egress
// has no switch.
inline constexpr const char* kMetaTransparentService = protocol::kEgressService;
inline constexpr int kMetaTransparentPort = protocol::kTransparentPort;
inline constexpr int kMetaTransparentDnsPort = protocol::kTransparentDnsPort;

struct MetaShare {
  std::string tag;         // 9p mount tag
  std::string guest_path;  // where the agent mounts it
  bool readonly = false;
};

// A forwarded listener in the guest (config.json "forwards"): the agent listens on `listen`
// ("tcp:IP:PORT" or "unix:PATH") and opens one `service` stream per connection.
struct MetaForward {
  std::string listen;
  std::string service;
};

// config.json "browser" (issue #18, docs/design.md "Browser VM"): present only in a browser VM's
// config. Its agent starts Chromium with DevTools on 127.0.0.1:cdp_port; the profile lives on
// `profile_device` (an ext4 filesystem the host made) or, when "", on a tmpfs.
struct MetaBrowser {
  int cdp_port = protocol::kBrowserCdpPort;
  std::string profile_device;
};

struct MetaConfig {
  std::string workspace;
  std::string boot_id;  // 32 hex chars, new every boot
  std::vector<MetaShare> shares;
  std::map<std::string, std::string> env;
  // Files the agent writes at each boot (after mounting home): placeholders, proxy settings.
  struct File {
    std::string path;  // absolute guest path
    std::string content;
    unsigned mode = 0644;
    std::string owner = "root";  // "root" or the workspace user
  };
  std::vector<File> files;
  std::string ca_certificate;  // PEM of the proxy CA the guest trusts ("" = none)
  // The coding agent (base/agent_tools.h name; the guest maps it to its pinned package) and the
  // folder its tmux window starts in ("" = the home; else the first shared folder).
  std::string tool = "shell";
  std::string workdir;
  // Automatic port forwarding (supervisor/ports.h, guest/listeners.h): the agent reports its
  // listening TCP ports on protocol::kPortsReportService.
  bool auto_ports = false;
  // The guest's forwarded listeners; empty = the agent's defaults (the proxy on 127.0.0.1:3128
  // and the SSH agent socket), which a non-empty list replaces.
  std::vector<MetaForward> forwards;
  // A browser VM: the "browser" key, and "home_device" "" (it has no home disk).
  std::optional<MetaBrowser> browser;
  // A devcontainer's lifecycle commands, the "devcontainer" object as guest/devcontainer.h reads
  // it (made by devcontainer/workspace.h's GuestLifecycleJson); null: none.
  nlohmann::json devcontainer;
  // "home_device" "" without a browser: the image builder VM, whose vdb is the disk it writes
  // (supervisor/builder_vm.h), never mounted by its agent.
  bool no_home = false;
};

// The config.json document for `config` (fixed fields: user dev, uid/gid 1000, home /home/dev,
// home_device /dev/vdb ("" for a browser VM), channel_port org.cloister.channel.0).
nlohmann::json MetaConfigJson(const MetaConfig& config);

// Extra files to place at the metadata disk's root: name -> contents (names without '/').
using MetaFiles = std::map<std::string, std::string>;

// Extra executables to copy to the root (mode 0755): name -> host path (e.g. cloister-audit).
using MetaExecutables = std::map<std::string, std::string>;

// Builds `image_path` (replacing it) from the agent binary, config and extra files, staging them in
// `image_path + ".d"` (removed afterwards).
Status BuildMetaDisk(const std::string& image_path, const std::string& agent_binary,
                     const MetaConfig& config, const MetaFiles& extra = {},
                     const MetaExecutables& executables = {});

// Finds a helper binary built by this project (`name`): $ENV_VAR, else next to the running
// executable, <dir>/../<module>/<name>, <dir>/../src/<module>/<name>, /usr/lib/cloister/<name>.
Result<std::string> FindHelperBinary(const std::string& name, const std::string& env_var,
                                     const std::string& module);

// Finds the agent binary: $CLOISTER_AGENT_BIN, else next to the running executable
// (<dir>/cloister-agent, <dir>/../guest/cloister-agent), else /usr/lib/cloister/cloister-agent.
Result<std::string> FindAgentBinary();

// A fresh random boot id (32 lower-case hex chars).
std::string NewBootId();

}  // namespace cloister::vm
