// The workspace's browser VM (issue #18, docs/design.md "Browser VM"): Chromium in a VM of its
// own, started and stopped by the workspace's supervisor, driven from the workspace guest over the
// Chrome DevTools Protocol.
//
// Who owns what:
//   - The supervisor owns one BrowserVm for its whole life (at most one browser VM per workspace).
//     `cloister browser NAME start|stop|status` reaches it through the control op kBrowserOp;
//     the lifecycle table decides a start (BrowserStartCheck: only while the workspace runs).
//   - A BrowserVm owns, while its VM lives: the QEMU process (spawned from the BrowserVm's own
//     long-lived thread, PR_SET_PDEATHSIG, so it never outlives the supervisor), the channel
//     multiplexer to its guest agent, and a temporary directory `<store>/tmp/browser-<ws>-XXXXXX/`
//     holding the disk (a qcow2 overlay whose backing is the browser image, read-only), a blank
//     scratch disk for vdb (no profile), the metadata disk, the console log, the sockets and the
//     owner lock. Stop, the workspace's stop and the supervisor's Cleanup delete the directory; a
//     directory left by a crash (its owner lock no longer held) is deleted by the next cloister
//     command (CollectStaleBrowserDirs).
//   - With --keep-profile (BrowserStartOptions::keep_profile) the profile is the workspace's
//     encrypted disk (browser/profile_disk.h), not the tmpfs: the supervisor, which holds the
//     workspace lock for its whole life, calls EnsureProfileDisk, boots QEMU paused (-S) with a
//     pcie-root-port, AttachProfile's it over QMP (SECURITY: the key reaches QEMU only as a QMP
//     `secret` object, never argv, environment or a file), then `cont`. Fail closed: a disk that
//     cannot be made or attached fails the start; it never falls back to the tmpfs.
//   - Automatic start (opt-in, config.json "browser" {"autostart": true}, `cloister config NAME
//     --browser-autostart on|keep-profile`, read at each such stream, so a change applies at
//     once): a `cdp` stream while no browser VM runs starts one
//     (Options::autostart supplies the workspace's settings) and is joined once READY. SECURITY:
//     a hostile guest opening many streams causes at most one start at a time (AutostartGate),
//     at most kMaxPendingCdp waiting streams, and a failed start is retried only after a growing
//     back-off.
//   - SECURITY: the browser VM's channel offers two services only, `proxy` and `egress`, served by
//     the WORKSPACE's egress proxy (same policy, placeholders and compromise detector) with every
//     trace record marked "source":"browser"; any other stream it opens is refused
//     (RegisterBrowserServices). The workspace guest's `cdp` streams are spliced by the host to
//     the browser VM's host-opened `tcp ["9222"]`: the browser VM never gets any other path to
//     the workspace VM.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/result.h"
#include "channel/mux.h"
#include "lifecycle/lifecycle.h"
#include "store/config.h"
#include "supervisor/egress.h"
#include "vm/accel.h"
#include "vm/meta_disk.h"
#include "vm/qmp.h"

namespace cloister::vm {

// The control op (supervisor/control.h): {"op":"browser","action":"start"|"stop"|"status",
// "image": ABSOLUTE PATH of the browser image's disk (start; the CLI resolves --image),
// "memory_mib": N, "cpus": N}.
inline constexpr char kBrowserOp[] = "browser";
// The trace records' source of the browser VM's requests (proxy/trace.h).
inline constexpr char kBrowserTraceSource[] = "browser";
// `<store>/tmp/` and the prefix of a browser VM's directory in it.
inline constexpr char kStoreTmpDir[] = "tmp";
inline constexpr char kBrowserDirPrefix[] = "browser-";
// The owner lock inside the directory (a pid file, base/pid_file.h: locked while the VM lives).
inline constexpr char kBrowserOwnerFile[] = "owner.pid";
// The default image name (`cloister image build --browser`) and resources.
inline constexpr char kBrowserImageName[] = "browser";
inline constexpr int kBrowserDefaultMemoryMib = 1024;
inline constexpr int kBrowserDefaultCpus = 1;
// An overridable file of extra files for the browser VM's metadata ([{path, content, mode,
// owner}], JSON), for tests and debugging (like CLOISTER_PROXY_RESOLVE): a host user's choice.
inline constexpr char kBrowserFilesEnv[] = "CLOISTER_BROWSER_FILES";
// The image SPEC an automatic start uses instead of kBrowserImageName (a catalog name or a raw
// image path, resolved with the same checks as `browser start --image`): tests and debugging.
inline constexpr char kBrowserImageEnv[] = "CLOISTER_BROWSER_IMAGE";

struct BrowserStartOptions {
  std::string image_path;  // the browser image's raw disk; vmlinuz and initrd.img beside it
  int memory_mib = kBrowserDefaultMemoryMib;
  int cpus = kBrowserDefaultCpus;
  // The profile on the workspace's encrypted disk (browser/profile_disk.h) instead of a tmpfs.
  bool keep_profile = false;
};

// The id of the pcie-root-port a --keep-profile browser VM is started with (the profile disk is
// hot-added behind it while QEMU waits at -S).
inline constexpr char kProfileRootPort[] = "rp-profile";

// The workspace's browser settings: config.json "browser" (store/config_section.h), absent =
// defaults. {"autostart": bool, "keep_profile": bool}: keep_profile is what an automatic start
// uses (an explicit `browser start` takes its own --keep-profile).
inline constexpr char kBrowserConfigKey[] = "browser";
struct BrowserSettings {
  bool autostart = false;
  bool keep_profile = false;
  bool operator==(const BrowserSettings&) const = default;
};
Result<BrowserSettings> BrowserSettingsFromConfig(const WorkspaceConfig& config);
Status PutBrowserSettings(WorkspaceConfig& config, const BrowserSettings& settings);
// `cloister config NAME --browser-autostart VALUE`: "off", "on" (tmpfs profile) or
// "keep-profile"; anything else is kInvalidArgument with the accepted values.
Result<BrowserSettings> ParseAutostartValue(const std::string& value);
// The inverse, for `config` and `describe`: "off", "on" or "keep-profile".
std::string AutostartValue(const BrowserSettings& settings);

// The automatic start's gate (pure: the caller passes the clock). SECURITY: at most one start at a
// time however many `cdp` streams the guest opens, and after a failed start none until a back-off
// (kAutostartFirstBackoff, doubling per consecutive failure up to kAutostartMaxBackoff) has passed;
// a success resets it.
inline constexpr std::chrono::seconds kAutostartFirstBackoff{10};
inline constexpr std::chrono::seconds kAutostartMaxBackoff{600};
// Streams waiting for a start in progress; more are closed.
inline constexpr size_t kMaxPendingCdp = 16;
class AutostartGate {
 public:
  using Clock = std::chrono::steady_clock;
  enum class Decision {
    kStart,   // no start in progress and no back-off: the caller starts one, then calls Finish
    kWait,    // a start is in progress: the stream waits for it
    kRefuse,  // a recent start failed: closed until retry_at()
  };
  Decision OnConnection(Clock::time_point now);
  void Finish(bool ok, Clock::time_point now);
  bool in_flight() const { return in_flight_; }
  int failures() const { return failures_; }
  Clock::time_point retry_at() const { return retry_at_; }

 private:
  bool in_flight_ = false;
  int failures_ = 0;
  Clock::time_point retry_at_{};
};

// Validates the options (absolute image path, 256..65536 MiB, 1..16 CPUs): an error names the fix.
Status ValidateBrowserStartOptions(const BrowserStartOptions& options);

// The lifecycle table's answer for a browser start (as a stream into the guest: only a running
// workspace); OK or the table's refusal with its hint.
Status BrowserStartCheck(lifecycle::State state, const std::string& workspace,
                         const std::string& detail = "");

// `<store>/tmp/`.
std::string StoreTmpDir(const std::string& store_root);

// Deletes every `<store>/tmp/browser-*` directory whose owner lock is not held (its supervisor is
// gone), and, of one without an owner file, only one older than a minute (a start may be making
// it). Never follows a symlink. Returns the directories removed. Called by the lifecycle verbs
// (start, stop, run), `ls` and `browser`.
std::vector<std::string> CollectStaleBrowserDirs(const std::string& store_root);

// The browser VM's metadata config (pure): the proxy environment and CA of `guest` but none of
// its placeholders or credential files, `browser` {cdp_port 9222, profile_device ""}, no home
// disk, and one forward (the proxy on 127.0.0.1:3128); no SSH agent.
MetaConfig BrowserMetaConfig(const std::string& workspace, const std::string& boot_id,
                             const GuestSetup& guest,
                             const std::vector<MetaConfig::File>& extra_files = {});

// Registers the only services the browser VM's guest may open: `proxy` and `egress`.
void RegisterBrowserServices(channel::Mux& mux, channel::ServiceHandler proxy,
                             channel::ServiceHandler egress);

class BrowserVm {
 public:
  struct Options {
    std::string store_root;
    std::string workspace;
    Accel accel = Accel::kTcg;
    bool sandbox = true;
    uint32_t qemu_id = 0;             // the workspace's (Store::QemuId)
    std::string output_path;          // QEMU's stdout/stderr (the supervisor's log)
    std::function<void(const std::string&)> log;
    std::chrono::seconds ready_timeout{600};
    // Where the kept profile lives (browser/profile_disk.h ProfileLocation): the store's keys
    // directory and the workspace's directory. Empty: --keep-profile is refused.
    std::string keys_dir;
    std::string workspace_dir;
    // The automatic start (supervisor): the options and the current egress proxy for a start at
    // a `cdp` stream, or an error saying why not (not opted in, the workspace not running...),
    // whose message and hint are logged. Null: no automatic start. Runs on a thread of its own.
    struct AutostartPlan {
      BrowserStartOptions options;
      std::shared_ptr<Egress> egress;
    };
    std::function<Result<AutostartPlan>()> autostart;
    // Whether the workspace opted in now (config.json "browser" autostart), asked at each `cdp`
    // stream while no browser VM runs and no start is in progress (cheap: the supervisor re-reads
    // the config only when it changed). Null or false: the stream is closed, as without autostart.
    std::function<bool()> autostart_enabled;
  };
  explicit BrowserVm(Options options);
  ~BrowserVm();  // Shutdown()
  BrowserVm(const BrowserVm&) = delete;
  BrowserVm& operator=(const BrowserVm&) = delete;

  // Boots the browser VM and waits for its agent's READY (Chromium's DevTools port accepts).
  // kAlreadyExists when one runs. `egress` is the workspace's current proxy.
  Result<nlohmann::json> Start(const BrowserStartOptions& options, std::shared_ptr<Egress> egress);
  // Kills its QEMU and deletes its directory. OK when none runs.
  Status Stop();
  // Stop, then ends the owner thread (the supervisor's Cleanup).
  void Shutdown();
  // {"state": "stopped"|"starting"|"running", "qemu_pid", "dir", "memory_mib", "cpus", "image",
  //  "started", "cdp_connections"}.
  nlohmann::json StatusJson();
  // A `cdp` stream from the workspace guest: bridged to the browser VM's `tcp ["9222"]`; when
  // none runs, held for a start in progress or the automatic start (Options::autostart), else
  // closed. Takes ownership of `fd`; does not block.
  void ConnectCdp(int fd);
  // Number of automatic starts begun (tests).
  uint64_t autostarts() {
    std::lock_guard<std::mutex> l(mu_);
    return autostarts_;
  }

 private:
  struct Running;
  Status StartLocked(const BrowserStartOptions& options, std::shared_ptr<Egress> egress,
                     std::shared_ptr<Running> run);
  void RunOnOwner(std::function<void()> job);
  void OwnerLoop();
  void Teardown(const std::shared_ptr<Running>& run);
  nlohmann::json StatusJsonLocked(const std::shared_ptr<Running>& run);  // mu_ held
  void Log(const std::string& line) const;
  void DrainPending();  // joins the held `cdp` streams to the running VM, or closes them
  void Autostart();     // the automatic start's thread

  Options opts_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::shared_ptr<Running> run_;  // null: stopped
  bool starting_ = false;
  uint64_t cdp_connections_ = 0;
  std::vector<int> pending_cdp_;  // streams waiting for a start (at most kMaxPendingCdp)
  AutostartGate gate_;
  uint64_t autostarts_ = 0;
  bool refusal_logged_ = false;  // one log line per back-off window, not one per stream
  std::thread autostart_thread_;
  // The owner thread: every QEMU of this BrowserVm is forked from it (PR_SET_PDEATHSIG follows the
  // forking thread, so a connection thread that ends must not be the parent).
  std::deque<std::function<void()>> jobs_;
  bool quit_ = false;
  std::thread owner_;
};

}  // namespace cloister::vm
