// The guest agent's browser role (issue #18): in a browser VM (config.json has "browser"), after
// the usual setup the agent mounts the profile (tmpfs, or the host's ext4 profile disk), makes the
// proxy CA trusted in the profile's NSS database, and runs `chromium` headless as the config's
// user with DevTools on 127.0.0.1:<cdp_port> only, restarting it when it dies (bounded). The
// agent sends READY once the DevTools port accepts. The host reaches DevTools with the `tcp`
// service (guest/tcp_connect.h) on the browser VM's channel; the browser VM itself opens nothing
// towards the workspace. Owned by the agent (agent.cc); see docs/design.md "Guest agent".
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "base/result.h"
#include "guest/config.h"
#include "guest/users.h"

namespace cloister::guest {

// Where the profile filesystem is mounted (tmpfs or the profile device). Everything of a browsing
// session lives below it: HOME (with .pki/nssdb), the XDG cache and config, Chromium's user data.
inline constexpr char kBrowserProfileMount[] = "/var/lib/cloister-browser";

// One mount(2) call.
struct MountSpec {
  std::string source;
  std::string target;
  std::string fstype;
  unsigned long flags = 0;
  std::string data;
};

// The profile's mount: tmpfs (mode 0700, owned by the user) when profile_device is "", else the
// ext4 profile device. nosuid, nodev and noexec either way.
MountSpec ProfileMount(const BrowserConfig& config, const UserInfo& user,
                       const std::string& mount_point = kBrowserProfileMount);

// The block device of a profile_device: a "/dev/NAME" as is; "serial:S" is looked up as the
// `NAME` whose `<sys_block>/NAME/serial` holds exactly S (trailing whitespace aside), giving
// "<dev_dir>/NAME"; kNotFound when no disk has it (kInvalidArgument when two do, or for anything
// else: fail closed).
// SECURITY: the serial files are the kernel's view of the host's virtio devices; read bounded.
Result<std::string> ResolveProfileDevice(const std::string& profile_device,
                                         const std::string& sys_block = "/sys/block",
                                         const std::string& dev_dir = "/dev");

// The directories below the profile mount.
struct BrowserPaths {
  std::string home;       // MOUNT/home: HOME of Chromium (its NSS db is HOME/.pki/nssdb)
  std::string user_data;  // MOUNT/chromium: --user-data-dir
  std::string log;        // Chromium's stdout and stderr (on /run, a tmpfs)
};
inline constexpr char kBrowserLog[] = "/run/cloister-browser.log";
BrowserPaths BrowserPathsFor(const std::string& mount_point = kBrowserProfileMount,
                             const std::string& log = kBrowserLog);

// Chromium's command line: `chromium` (PATH lookup), headless, DevTools on 127.0.0.1:cdp_port
// only, the profile at paths.user_data, no background traffic of its own (updates, sync, metrics),
// no QUIC (the egress path is TCP); `proxy` ("" = none: the agent's transparent egress carries
// every connection) as --proxy-server. Chromium's sandbox stays on.
std::vector<std::string> ChromiumArgv(const BrowserConfig& config, const BrowserPaths& paths,
                                      const std::string& proxy);

// The HTTP proxy Chromium should use, from the config's forwards: "http://HOST:PORT" of the tcp
// forward to the `proxy` service; "" if there is none.
std::string BrowserProxy(const AgentConfig& config);

// True if something accepts TCP connections on 127.0.0.1:port.
bool LoopbackPortAccepts(int port);

struct BrowserOptions {
  BrowserConfig config;
  UserInfo user;
  std::vector<std::string> env;  // Chromium's environment (HOME etc. are replaced)
  std::string proxy;             // BrowserProxy()
  std::string ca_file;           // the proxy CA's PEM file ("" = none to trust)
  bool switch_user = true;
  std::string mount_point = kBrowserProfileMount;
  std::string log_file = kBrowserLog;  // truncated at every start of Chromium
  // mount(2), injected by tests (returns 0 or an errno); default: the real one.
  std::function<int(const MountSpec&)> mount;
  // Where a profile disk named by serial is looked up (ResolveProfileDevice), and how long it may
  // take to appear.
  std::string sys_block = "/sys/block";
  std::string dev_dir = "/dev";
  std::chrono::milliseconds device_wait{20000};
  int max_restarts = 5;  // restarts after a death before giving up (a long run resets the count)
  std::function<void(const std::string&)> log;
};

// Starts and keeps Chromium running on its own thread.
class BrowserSupervisor {
 public:
  explicit BrowserSupervisor(BrowserOptions options);
  ~BrowserSupervisor();
  BrowserSupervisor(const BrowserSupervisor&) = delete;
  BrowserSupervisor& operator=(const BrowserSupervisor&) = delete;

  // Mounts the profile and trusts the CA (fail closed: if the profile cannot be mounted where it
  // belongs, Chromium is not started and the error is returned), then starts Chromium and its
  // restart loop.
  Status Start();
  // Waits until DevTools accepts on 127.0.0.1:cdp_port (OK), Chromium gave up (its last error),
  // or `timeout`.
  Status WaitUntilAccepting(std::chrono::milliseconds timeout);
  // How many times Chromium was started.
  int starts() const { return starts_; }

 private:
  Status PrepareProfile();
  Status TrustCa();
  void Loop();
  Result<pid_t> SpawnChromium();

  BrowserOptions o_;
  BrowserPaths paths_;
  std::atomic<int> starts_{0};
  std::atomic<bool> stop_{false};
  std::atomic<bool> gave_up_{false};
  // Held while Chromium is spawned and while its pid is set or cleared, and by the destructor
  // while it sets stop_ and kills: a stop that lands between the loop's check and the spawn
  // would otherwise miss the child and wait for it to end on its own.
  std::mutex spawn_mu_;
  pid_t pid_ = -1;  // guarded by spawn_mu_
  std::thread thread_;
};

}  // namespace cloister::guest
