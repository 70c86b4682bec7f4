// cloister-agent: the guest side of a workspace. Started by the image's boot hook as root with
// `--meta /run/cloister/meta`. Per boot it applies config.json (hostname, home disk, 9p shares,
// environment, files), starts the `cloister` tmux session that `cloister attach` joins, then
// serves the channel: `exec` streams from the host (each waits for the session), guest-local
// listeners forwarded to host services (proxy, ssh-agent, ...), and READY once a login shell in a
// pty answers and the transparent egress is up (the session may still be starting).
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"
#include "guest/config.h"
#include "guest/devcontainer.h"
#include "guest/tool.h"
#include "guest/users.h"

namespace cloister::guest {

struct AgentOptions {
  std::string meta_dir = protocol::kMetaMountPoint;
  std::string config_path;    // default: meta_dir/config.json
  std::string channel_path;   // tests: a unix socket to connect to instead of the virtio port
  bool setup = true;          // per-boot system setup (mounts, hostname, files); off in host tests
  std::string passwd_path = "/etc/passwd";
  std::string group_path = "/etc/group";
  bool switch_user = true;
  std::string profile_path = "/etc/profile.d/cloister.sh";
  ToolPaths tool_paths;  // the coding agent's marker, status, log and scripts (guest/tool.h)
  LifecyclePaths lifecycle_paths;  // a devcontainer's marker, status, log, window (devcontainer.h)
  // Where the proxy CA goes: its own file (picked up by update-ca-certificates on a Debian
  // system) and the bundle every TLS library reads (OpenSSL, curl, git, Python, Node with
  // NODE_EXTRA_CA_CERTS). The bundle gets the PEM appended once, never a second time.
  std::string ca_file = "/usr/local/share/ca-certificates/cloister.crt";
  std::string ca_bundle = "/etc/ssl/certs/ca-certificates.crt";
  // Transparent egress (guest/transparent.h), when config.json enables it: where resolv.conf
  // goes, and whether to change the system (lo, the local route, nft rules, resolv.conf). Host
  // tests run the agent in a network namespace of their own with a temp resolv.conf.
  std::string resolv_conf = "/etc/resolv.conf";
  bool egress_system_setup = true;
  std::function<void(std::string_view)> log;  // default: stderr (the serial console)
};

// Runs until a fatal error (returns the process exit code). Normally never returns.
int RunAgent(const AgentOptions& options);

// Makes the guest trust `pem`: writes it to `ca_file` and appends it to `bundle` unless the
// bundle already holds it (created if absent, e.g. on the busybox test image).
Status InstallCaCertificate(const std::string& pem, const std::string& ca_file,
                            const std::string& bundle);

// The per-boot setup, in two parts; each failing step is logged, not fatal. The system part is
// what a login shell needs (hostname, the home and shared folders mounted, the profile); the
// files part is the proxy CA and config.json's files. ApplySetup is both, in that order.
void ApplySystemSetup(const AgentConfig& config, const AgentOptions& options);
void ApplyFiles(const AgentConfig& config, const AgentOptions& options);
void ApplySetup(const AgentConfig& config, const AgentOptions& options);

// Finds /dev/vportNpM whose /sys/class/virtio-ports/*/name is `name` (creating the node from its
// dev numbers when there is no udev). kNotFound while the port has not appeared.
Result<std::string> FindVirtioPort(const std::string& name,
                                   const std::string& sys_dir = "/sys/class/virtio-ports",
                                   const std::string& dev_dir = "/dev");

// The ready probe: spawns `user`'s login shell in a pty, asks it to compute a nonce, and waits for
// the answer, which cannot be the echo of what was typed. OK only if the shell answered.
Status CheckTerminal(const UserInfo& user, const std::vector<std::string>& env, bool switch_user,
                     std::chrono::milliseconds timeout);

// A tmux window: its name and command (empty: tmux's default shell).
struct TmuxWindow {
  std::string name;
  std::vector<std::string> command;
};

// Starts (or keeps) the detached tmux session `cloister` as `user`. Its first window starts in
// `cwd` ("" = the home) and runs `window_command` (empty: tmux's default shell), e.g. the coding
// agent's window script (guest/tool.h); `more` are further windows (the devcontainer's,
// guest/devcontainer.h), made by the same tmux process.
Status EnsureTmuxSession(const UserInfo& user, const std::vector<std::string>& env, bool switch_user,
                         const std::string& cwd = "",
                         const std::vector<std::string>& window_command = {},
                         const std::string& window_name = "",
                         const std::vector<TmuxWindow>& more = {});

// Listens on "tcp:HOST:PORT" or "unix:PATH"; returns the listening fd (close-on-exec). For tcp
// with port 0, `bound_port` receives the port chosen.
Result<int> ListenOn(const std::string& spec, int* bound_port = nullptr);

}  // namespace cloister::guest
