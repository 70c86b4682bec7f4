// The per-boot configuration the host writes to the metadata disk (config.json, schema v1,
// agreed with the VM module in notes; see docs/design.md "Guest agent").
#pragma once

#include <map>
#include <string>
#include <vector>

#include "base/result.h"
#include "guest/devcontainer.h"
#include "protocol/contract.h"

namespace cloister::guest {

struct ShareConfig {
  std::string tag;    // 9p mount tag
  std::string path;   // where to mount it in the guest
  bool readonly = false;
};

struct FileConfig {
  std::string path;
  std::string content;
  unsigned mode = 0644;
  std::string owner = "root";  // "root" or the workspace user
};

struct ForwardConfig {
  std::string listen;   // "tcp:127.0.0.1:3128" or "unix:/run/cloister/ssh-agent.sock"
  std::string service;  // host service name
};

// Transparent egress (guest/transparent.h). The host's metadata config always carries it
// (vm/meta_disk.cc); absent means off (host unit tests of the agent).
struct TransparentConfig {
  bool enabled = false;
  std::string service = protocol::kEgressService;  // host channel service
  int port = protocol::kTransparentPort;           // the agent's redirect listener (0.0.0.0)
  int dns_port = protocol::kTransparentDnsPort;    // the agent's DNS (0.0.0.0, UDP and TCP)
};

// The browser role (issue #18; guest/browser.h): present only in a browser VM's config.json.
inline constexpr char kProfileSerialPrefix[] = "serial:";
struct BrowserConfig {
  bool enabled = false;  // the "browser" key is present
  int cdp_port = protocol::kBrowserCdpPort;  // Chromium's DevTools port, on 127.0.0.1 only
  // "" = the profile lives on a tmpfs; else the block device of the ext4 profile filesystem the
  // host made (a LUKS-encrypted qcow2 QEMU decrypts), mounted at kBrowserProfileMount: a
  // /dev/NAME path, or "serial:" and the disk's virtio serial ([a-z0-9-]{1,20}; the host sends
  // "serial:cloister-profile"), which the agent finds under /sys/block/*/serial (the hot-added
  // disk's vdX name is not fixed).
  std::string profile_device;
};

struct AgentConfig {
  int version = 1;
  std::string workspace;
  std::string hostname;
  std::string boot_id;
  std::string user = protocol::kGuestUser;
  std::string home = protocol::kGuestHome;
  std::string home_device = protocol::kHomeDevice;
  std::string channel_port = protocol::kChannelPortName;
  std::vector<ShareConfig> shares;
  std::map<std::string, std::string> env;
  std::vector<FileConfig> files;
  std::vector<ForwardConfig> forwards;  // default: proxy on 127.0.0.1:3128, ssh-agent socket
  // PEM of the per-install proxy CA the guest must trust ("" = none). Installed by ApplySetup
  // into the system trust store (see AgentOptions::ca_file / ca_bundle).
  std::string ca_certificate;
  TransparentConfig transparent;
  int ready_timeout_s = 120;
  // The coding agent of the workspace (base/agent_tools.h; "shell": none) and the folder its tmux
  // window starts in ("" = the home; else the first shared folder's guest path).
  std::string tool = "shell";
  std::string workdir;
  // --auto-ports: report the guest's listening TCP ports to the host (guest/listeners.h).
  bool auto_ports = false;
  // A browser VM: no home disk (home_device ""), no tmux; Chromium instead (guest/browser.h).
  BrowserConfig browser;
  // A devcontainer's lifecycle commands (guest/devcontainer.h); enabled when the key is there.
  DevcontainerLifecycle devcontainer;
};

Result<AgentConfig> ParseAgentConfig(const std::string& json);
Result<AgentConfig> LoadAgentConfig(const std::string& path);

// Shell-quotes `v` in single quotes for /etc/profile.d.
std::string ShellQuote(const std::string& v);
// The text of /etc/profile.d/cloister.sh for `env`.
std::string ProfileScript(const std::map<std::string, std::string>& env);

}  // namespace cloister::guest
