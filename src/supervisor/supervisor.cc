#include "supervisor/supervisor.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <future>
#include <iostream>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

#include "base/agent_tools.h"
#include "base/file_util.h"
#include "base/strings.h"
#include "lifecycle/lifecycle.h"
#include "channel/exec_client.h"
#include "channel/mux.h"
#include "store/store.h"
#include "sshagent/agent.h"
#include "sshagent/ed25519_key.h"
#include "sshagent/host_pins.h"
#include "sshagent/ide_keys.h"
#include "sshagent/policy.h"
#include "sshagent/vault_key_store.h"
#include "store/layout.h"
#include "supervisor/boot_plan.h"
#include "supervisor/browser_vm.h"
#include "supervisor/boot_timings.h"
#include "supervisor/consent.h"
#include "supervisor/control.h"
#include "proxy/policy.h"
#include "supervisor/egress.h"
#include "supervisor/ports.h"
#include "vm/meta_disk.h"
#include "vm/process.h"
#include "vm/qemu_access.h"
#include "vm/qemu_args.h"
#include "vm/qmp.h"
#include "supervisor/qemu_launch.h"
#include "supervisor/ssh_confirm.h"
#include "supervisor/state.h"
#include "supervisor/workspace.h"

namespace cloister::vm {

namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

// The supervisor's VM is in one of the lifecycle's states (lifecycle/lifecycle.h): booting,
// running, paused, stopping, suspending, rebooting while it lives; stopped or suspended once
// QEMU is gone (the main loop then exits). Only the table's `next` changes it.
using Phase = lifecycle::State;

// One queued lifecycle action (the closed set is lifecycle::Action, Firecracker's VmmAction),
// with what its effect needs.
struct Action {
  using Type = lifecycle::Action;
  explicit Action(Type t) : type(t) {}
  Type type;
  uint64_t generation = 0;  // QEMU generation an event belongs to (stale events are dropped)
  int exit_status = 0;
  std::chrono::milliseconds timeout{60000};
  std::string info;
  std::shared_ptr<std::promise<json>> reply;
  Clock::time_point at = Clock::now();  // when it was queued (READY's arrival, for --timings)
};

void Log(const std::string& line) {
  std::time_t t = std::time(nullptr);
  char ts[32];
  std::strftime(ts, sizeof(ts), "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  std::cerr << ts << " " << line << std::endl;
}

class Supervisor {
 public:
  explicit Supervisor(const SupervisorOptions& options) : opts_(options) {}
  int Run();

 private:
  Status Init();
  Status Boot(bool resume);
  Status Resume();
  void Handle(Action action);
  Status TakeProvenBootCheckpoint();
  Result<CheckpointRecord> TakeLiveCheckpoint(CheckpointOptions options);
  Result<std::string> PassToQmp(const std::string& path);
  Status Suspend();
  void Cleanup();
  void GuestPoweroff();
  void Enqueue(Action a);
  void Progress(const std::string& stage);
  void EndPhase(const std::string& name);
  void SendTimings(const std::vector<BootPhase>& guest, const std::optional<BootPhase>& last);
  void FinishProgress(const std::string& line);
  void FailBoot(const Error& error);
  void ReplyAll(std::vector<std::shared_ptr<std::promise<json>>>& waiters, const json& reply);
  void AcceptLoop();
  void HandleConnection(int fd);
  json StatusReply();
  void SignalLoop();
  Status StartEgress();
  Status StartPorts();
  json HandlePorts(const json& req);
  json HandleBrowser(const json& req);
  // config.json's "browser" settings, re-read when the file's mtime or size changed; a malformed
  // or unreadable one is off (logged once per change).
  BrowserSettings CurrentBrowserSettings();
  std::mutex browser_settings_mu_;
  struct timespec browser_settings_mtime_ {};
  off_t browser_settings_size_ = -1;
  BrowserSettings browser_settings_;

  SupervisorOptions opts_;
  std::unique_ptr<Store> store_;
  std::optional<WorkspaceLock> lock_;
  WorkspaceConfig config_;
  RunPaths paths_;
  int pid_fd_ = -1;
  int listen_fd_ = -1;
  int wake_pipe_[2] = {-1, -1};

  std::unique_ptr<QmpClient> qmp_;
  pid_t qemu_pid_ = -1;
  uint64_t generation_ = 0;
  std::map<std::string, std::string> top_nodes_;  // "system"/"home" -> current top node name
  int exit_code_ = 0;
  bool ephemeral_ = false;
  std::optional<Clock::time_point> deadline_;
  // Boot phases on the host's clock (supervisor/boot_timings.h): the current phase began at
  // phase_start_; QEMU answered QMP at qmp_up_; boot_start_ is the supervisor's start (or the
  // reboot's) for the total.
  Clock::time_point boot_start_ = Clock::now();
  Clock::time_point phase_start_ = boot_start_;
  Clock::time_point qmp_up_ = boot_start_;
  std::vector<BootPhase> host_phases_;

  // Shared with connection threads.
  std::mutex mu_;
  std::string pause_reason_;  // why the compromise detector froze the VM (kPaused)
  std::condition_variable cv_;
  std::deque<Action> queue_;
  Phase phase_ = Phase::kBooting;
  std::string stage_ = "starting";
  std::string boot_id_;
  KernelBoot kernel_boot_ = KernelBoot::kBzImage;  // how this boot entered its kernel
  std::string SuspendKernelPath() const {
    return paths_.workspace_dir + "/" + std::string(layout::kSuspendKernelFile);
  }
  std::string last_checkpoint_;
  std::shared_ptr<channel::Mux> mux_;
  int active_connections_ = 0;

  std::vector<std::shared_ptr<std::promise<json>>> stop_waiters_;
  std::vector<std::shared_ptr<std::promise<json>>> ready_waiters_;

  // The wire boundary (per boot): the egress proxy and the workspace's sign-only SSH agent. The
  // channel services "proxy" and "ssh-agent" hand each guest stream to them.
  std::shared_ptr<Egress> egress_;
  std::shared_ptr<sshagent::SignOnlyAgent> ssh_agent_;
  // Per-signature confirmation (vm/ssh_confirm.h): `cloister ssh-confirm NAME` listeners.
  std::shared_ptr<SshConfirmBroker> ssh_confirm_;
  // Ask-before-use consent (supervisor/consent.h): the proxy's gate and the SSH questions;
  // `cloister approve NAME` and the dashboard listen. Grants live here only.
  std::shared_ptr<ConsentBroker> consent_;
  // Published ports (supervisor/ports.h): -p from the config at every boot, `port add` while it
  // runs, the guest's own with auto-ports. Each connection becomes a kTcpService stream.
  std::shared_ptr<PortForwarder> ports_;
  bool auto_ports_ = false;
  // The workspace's browser VM (supervisor/browser_vm.h): started by the `browser` op, stopped by
  // it, by the workspace's QEMU exiting (stop, reboot, suspend), by a compromise and by Cleanup.
  std::shared_ptr<BrowserVm> browser_;
};

void Supervisor::Progress(const std::string& stage) {
  {
    std::lock_guard<std::mutex> l(mu_);
    stage_ = stage;
  }
  Log("stage: " + stage);
  if (opts_.progress_fd >= 0) {
    std::string line = "stage " + stage + "\n";
    if (write(opts_.progress_fd, line.data(), line.size()) < 0) {
      close(opts_.progress_fd);
      opts_.progress_fd = -1;
    }
  }
}

void Supervisor::EndPhase(const std::string& name) {
  Clock::time_point now = Clock::now();
  int64_t ms = std::chrono::duration_cast<std::chrono::milliseconds>(now - phase_start_).count();
  host_phases_.emplace_back(name, ms);
  phase_start_ = now;
  Log("timing: " + name + " " + std::to_string(ms) + " ms");
}

// The "timings" line for `start --timings`, before the final line: the host's phases so far,
// the guest's, then `last` (the checkpoint).
void Supervisor::SendTimings(const std::vector<BootPhase>& guest,
                             const std::optional<BootPhase>& last) {
  std::vector<BootPhase> all = host_phases_;
  all.insert(all.end(), guest.begin(), guest.end());
  if (last) all.push_back(*last);
  all.emplace_back("total", std::chrono::duration_cast<std::chrono::milliseconds>(
                                Clock::now() - boot_start_).count());
  std::string line = FormatTimingsLine(all);
  Log("timing: " + line);
  if (opts_.progress_fd < 0) return;
  line += "\n";
  (void)!write(opts_.progress_fd, line.data(), line.size());
}

void Supervisor::FinishProgress(const std::string& line) {
  if (opts_.progress_fd < 0) return;
  std::string l = line + "\n";
  (void)!write(opts_.progress_fd, l.data(), l.size());
  close(opts_.progress_fd);
  opts_.progress_fd = -1;
}

void Supervisor::FailBoot(const Error& error) {
  Log("error: " + error.ToString());
  std::string hint = error.hint();
  if (hint.empty()) hint = "boot log: " + paths_.console_log + "; supervisor log: " + paths_.supervisor_log;
  std::string msg = error.message();
  for (char& c : msg) if (c == '\n' || c == '\t') c = ' ';
  FinishProgress("error " + msg + "\t" + hint);
  exit_code_ = 1;
}

void Supervisor::Enqueue(Action a) {
  {
    std::lock_guard<std::mutex> l(mu_);
    queue_.push_back(std::move(a));
  }
  cv_.notify_all();
}

Status Supervisor::Init() {
  ConsentBroker::Options cb;
  cb.workspace = opts_.name;
  cb.log = Log;
  consent_ = std::make_shared<ConsentBroker>(cb);
  SshConfirmBroker::Options co;
  co.workspace = opts_.name;
  co.log = Log;
  co.broker = consent_;
  ssh_confirm_ = std::make_shared<SshConfirmBroker>(co);
  PortForwarder::Options po;
  po.log = Log;
  // SECURITY: a published port only ever opens a stream into the guest (its agent connects to
  // its own loopback); the current channel session, or the connection is closed.
  po.open = [this](uint16_t port, int fd) {
    std::shared_ptr<channel::Mux> mux;
    {
      std::lock_guard<std::mutex> l(mu_);
      mux = mux_;
    }
    if (!mux) {
      close(fd);
      return;
    }
    mux->OpenAsync(protocol::kTcpService, {std::to_string(port)}, fd, [port](Status st) {
      if (!st.ok()) Log("ports: guest port " + std::to_string(port) + ": " + st.error().message());
    });
  };
  ports_ = std::make_shared<PortForwarder>(std::move(po));
  ASSIGN_OR_RETURN(store_, Store::Open(opts_.store_root));
  paths_ = RunPathsFor(*store_, opts_.name);
  std::error_code ec;
  fs::create_directories(paths_.run_dir, ec);
  chmod(paths_.run_dir.c_str(), 0700);
  ASSIGN_OR_RETURN(pid_fd_, ClaimPidFile(paths_.supervisor_pid));
  ASSIGN_OR_RETURN(listen_fd_, ListenUnix(paths_.supervisor_socket));
  if (pipe2(wake_pipe_, O_CLOEXEC) != 0) return ErrnoError("pipe", errno);
  std::thread([this] { AcceptLoop(); }).detach();
  std::thread([this] { SignalLoop(); }).detach();

  Progress("preparing disks");
  ASSIGN_OR_RETURN(WorkspaceLock lock, store_->LockWorkspace(opts_.name));
  lock_.emplace(std::move(lock));
  ASSIGN_OR_RETURN(config_, store_->LoadConfig(opts_.name));
  RETURN_IF_ERROR(Store::CheckNotCompromised(config_));
  ephemeral_ = IsEphemeral(config_);
  BrowserVm::Options bo;
  bo.store_root = store_->root();
  bo.workspace = opts_.name;
  bo.accel = opts_.accel;
  bo.sandbox = opts_.sandbox;
  ASSIGN_OR_RETURN(bo.qemu_id, store_->QemuId(opts_.name));
  bo.output_path = paths_.supervisor_log;
  bo.log = Log;
  bo.ready_timeout = opts_.ready_timeout;
  // The kept profile's place (browser/profile_disk.h): this supervisor holds the workspace lock
  // for its whole life, as EnsureProfileDisk asks.
  bo.keys_dir = store_->root() + "/" + std::string(layout::kKeysDir);
  bo.workspace_dir = store_->Paths(opts_.name).dir;
  // The automatic start at the first CDP connection (opt-in, config.json "browser"; fail
  // closed: a malformed key refuses the boot, and later reads as off). Read again whenever
  // config.json changed, so `cloister config NAME --browser-autostart` applies at once.
  if (auto settings = BrowserSettingsFromConfig(config_); !settings.ok()) return settings.error();
  if (opts_.resolve_image) {
    bo.autostart_enabled = [this] { return CurrentBrowserSettings().autostart; };
    bo.autostart = [this]() -> Result<BrowserVm::Options::AutostartPlan> {
      BrowserSettings browser_settings = CurrentBrowserSettings();
      if (!browser_settings.autostart) {
        return Error(ErrorCode::kFailedPrecondition, "the automatic start is off",
                     "`cloister config " + opts_.name + " --browser-autostart on`");
      }
      Phase phase;
      std::string detail;
      BrowserVm::Options::AutostartPlan plan;
      {
        std::lock_guard<std::mutex> l(mu_);
        phase = phase_;
        detail = pause_reason_;
        plan.egress = egress_;
      }
      RETURN_IF_ERROR(BrowserStartCheck(phase, opts_.name, detail));
      std::string spec = kBrowserImageName;
      if (const char* e = std::getenv(kBrowserImageEnv); e && *e) spec = e;
      auto image = opts_.resolve_image(spec);
      if (!image.ok()) {
        return Error(image.error().code(),
                     "browser image '" + spec + "': " + image.error().message(),
                     "build it: `cloister image build --browser`");
      }
      plan.options.image_path = *image;
      plan.options.keep_profile = browser_settings.keep_profile;
      Log("browser: automatic start (" + plan.options.image_path +
          (plan.options.keep_profile ? ", kept profile)" : ")"));
      return plan;
    };
  }
  browser_ = std::make_shared<BrowserVm>(std::move(bo));
  return OkStatus();
}

Status Supervisor::StartEgress() {
  if (egress_) egress_->Stop();
  WorkspacePaths wp = store_->Paths(opts_.name);
  EgressOptions eo;
  eo.workspace = opts_.name;
  eo.keys_dir = store_->root() + "/" + std::string(layout::kKeysDir);
  eo.secrets_file = wp.secrets;
  eo.trace_log = wp.trace_log;
  eo.config_lock = wp.config_lock;
  // A new boot: "until the VM stops" grants end (timed ones run on).
  consent_->EndVmGrants();
  eo.consent = consent_;
  std::string name = opts_.name;
  Store* store = store_.get();
  eo.on_compromise = [this, store, name](const proxy::CompromiseEvent& e) {
    std::string why = "placeholder of " + e.credential + " sent to " + e.host + " (" + e.where + ")";
    if (Status st = store->MarkCompromised(name, why); !st.ok()) {
      Log("marking compromised failed: " + st.error().ToString());
    }
    Action a(Action::Type::kCompromised);
    a.info = why;
    Enqueue(std::move(a));
  };
  // The workspace's SSH policy (config.json "ssh"): tunnel hosts/ports and confirmation. Fail
  // closed: a malformed policy or override refuses the boot.
  ASSIGN_OR_RETURN(sshagent::SshPolicy ssh_policy, sshagent::SshPolicyFromConfig(config_));
  eo.ssh_ports = ssh_policy.tunnel_ports;
  eo.ssh_hosts = ssh_policy.tunnel_hosts;
  // The egress policy (config.json "egress"), for both proxy and transparent mode; fail closed.
  ASSIGN_OR_RETURN(eo.egress_policy, proxy::EgressPolicyFromConfig(config_));
  RETURN_IF_ERROR(EgressOverridesFromEnv(eo));
  std::map<std::string, std::string> ssh_resolve = eo.resolve;  // the host key scans go there too
  ASSIGN_OR_RETURN(std::unique_ptr<Egress> egress, Egress::Start(std::move(eo)));
  {
    std::lock_guard<std::mutex> l(mu_);  // the `browser` op reads it on a connection thread
    egress_ = std::move(egress);
  }

  ssh_agent_.reset();
  sshagent::VaultKeyStore keys({store_->root() + "/" + std::string(layout::kKeysDir), wp.secrets,
                                opts_.name});
  ASSIGN_OR_RETURN(std::optional<sshagent::SecretString> seed, keys.LoadSeed());
  if (seed) {
    ASSIGN_OR_RETURN(sshagent::Ed25519Key key, sshagent::Ed25519Key::FromSeed(seed->view()));
    ssh_confirm_->Configure(ssh_policy.confirm, key.Fingerprint());
    std::string comment = sshagent::KeyComment(opts_.name);
    sshagent::ConfirmFn confirm;
    if (ssh_policy.confirm) {
      // The comment is what the guest's ssh names in "signing failed for ... agent refused".
      comment += " (confirm on the host: cloister ssh-confirm " + opts_.name + ")";
      confirm = [broker = ssh_confirm_](const sshagent::SignRequestInfo& info) {
        return broker->Confirm(info);
      };
      Log("ssh: each signature needs confirmation (`cloister ssh-confirm " + opts_.name + "`)");
    }
    // Login signatures only in sessions bound to a host key pinned for a policy host (pinned on
    // first use, sshagent/host_pins.h).
    auto pinner = std::make_shared<sshagent::HostKeyPinner>(sshagent::StoreHostPinnerDeps(
        store_.get(), opts_.name, ssh_policy.tunnel_hosts, ssh_resolve,
        [](const std::string& m) { Log(m); }));
    ssh_agent_ = std::make_shared<sshagent::SignOnlyAgent>(
        std::move(key), comment, confirm,
        [pinner](std::string_view blob) { return pinner->Bind(blob); });
  }
  return OkStatus();
}

// The config's published ports (config.json "ports"), bound before QEMU starts: a taken host
// port fails the start with its hint. Fail closed: a malformed section refuses the boot.
Status Supervisor::StartPorts() {
  ASSIGN_OR_RETURN(PortsConfig ports, PortsConfigFromConfig(config_));
  for (const ForwardInfo& f : ports_->List()) {
    if (f.origin == ForwardOrigin::kConfig) (void)ports_->RemoveForward(f.spec.host_port, f.spec.host_ip);
  }
  for (const PortSpec& spec : ports.publish) {
    auto bound = ports_->AddForward(spec, ForwardOrigin::kConfig);
    if (!bound.ok()) {
      return Error(bound.error().code(), "publishing -p " + spec.ToString() + ": " +
                                             bound.error().message(),
                   bound.error().hint());
    }
    Log("ports: published " + bound->ToString());
  }
  auto_ports_ = ports.auto_ports;
  return OkStatus();
}

Status Supervisor::Boot(bool resume) {
  ++generation_;
  if (generation_ > 1) {  // a reboot: its phases from here (the first boot's include Init)
    boot_start_ = phase_start_ = Clock::now();
  }
  host_phases_.clear();
  {
    std::lock_guard<std::mutex> l(mu_);
    phase_ = Phase::kBooting;
    boot_id_ = NewBootId();
  }
  ASSIGN_OR_RETURN(LiveDisks disks, store_->EnsureSystemDisk(*lock_));
  ASSIGN_OR_RETURN(config_, store_->LoadConfig(opts_.name));
  ASSIGN_OR_RETURN(KernelFiles kernel, KernelFilesFor(config_));
  EndPhase("disks");
  {
    // A resume must enter the kernel the way the suspended boot did (QEMU's option ROMs differ).
    KernelBoot want = KernelBoot::kPvh;
    if (resume) {
      auto saved = ReadFileBounded(SuspendKernelPath(), 64);
      want = saved.ok() ? ParseKernelBoot(Trim(*saved)).value_or(KernelBoot::kBzImage)
                        : KernelBoot::kBzImage;
    } else if (const char* v = std::getenv("CLOISTER_KERNEL_BOOT"); v && *v) {
      want = ParseKernelBoot(v).value_or(KernelBoot::kPvh);
    }
    std::string note;
    kernel = ChooseBootKernel(kernel, store_->root(), want, &kernel_boot_, &note);
    if (!note.empty()) Log(note);
    Log(std::string("kernel entry: ") + KernelBootName(kernel_boot_) + " " + kernel.kernel);
  }
  EndPhase("kernel-file");  // the PVH vmlinux: derived once per store and kernel, then re-checked

  Progress("starting the egress proxy");
  RETURN_IF_ERROR(StartEgress());
  EndPhase("proxy");
  RETURN_IF_ERROR(StartPorts());
  const bool meta_disk_present = access(paths_.meta_disk.c_str(), R_OK) == 0;
  if (!resume || !meta_disk_present) Progress("building the metadata disk");
  // The plan (supervisor/boot_plan.h) is pure; LaunchQemu does the I/O and the spawn.
  BootInputs in;
  in.workspace = opts_.name;
  in.boot_id = boot_id_;
  in.resume = resume;
  in.meta_disk_present = meta_disk_present;
  in.accel = opts_.accel;
  in.sandbox = opts_.sandbox;
  if (const char* cpu = std::getenv("CLOISTER_TCG_CPU"); cpu && *cpu) in.tcg_cpu = cpu;
  if (const char* tb = std::getenv("CLOISTER_TCG_TB_SIZE"); tb) in.tcg_tb_size = tb;
  if (const char* r = std::getenv("CLOISTER_FREE_PAGE_REPORTING"); r) in.free_page_reporting = r;
  if (const char* v = std::getenv("CLOISTER_DISK_AIO"); v) in.disk_aio = v;
  if (const char* v = std::getenv("CLOISTER_DISK_CACHE"); v) in.disk_cache = v;
  if (const char* v = std::getenv("CLOISTER_DISK_IOTHREAD"); v) in.disk_iothread = v;
  if (const char* r = std::getenv("CLOISTER_GUEST_NPM_REGISTRY"); r && *r) in.npm_registry = r;
  in.config = config_;
  in.disks = disks;
  in.kernel = kernel;
  in.guest = egress_->guest();
  // IDE access (guest/sshd.h, sshagent/ide_keys.h): the workspace's sshd host key and the
  // store's client PUBLIC key (made on first use). SECURITY: the client's private key stays here.
  ASSIGN_OR_RETURN(sshagent::SshdGuestMaterial sshd,
                   sshagent::SshdGuestMaterialFor(
                       store_->root() + "/" + std::string(layout::kKeysDir), paths_.workspace_dir));
  in.guest.files.push_back({protocol::kGuestSshdHostKey, sshd.host_key.str(), 0600, "root"});
  in.guest.files.push_back({protocol::kGuestSshdAuthorizedKeys, sshd.authorized_keys, 0644, "root"});
  in.paths = paths_;
  ASSIGN_OR_RETURN(BootPlan plan, PlanBoot(in));
  QemuLaunchOptions launch;
  launch.output_path = paths_.supervisor_log;
  launch.progress = [this](const std::string& stage) { Progress(stage); };
  launch.log = Log;
  launch.phase = [this](const std::string& name) { EndPhase(name); };
  // The uid is allocated in the store's registry (unique within the store, issue 15 item 13).
  ASSIGN_OR_RETURN(launch.qemu_id, store_->QemuId(opts_.name));
  ASSIGN_OR_RETURN(qemu_pid_, LaunchQemu(plan, launch));
  pid_t pid = qemu_pid_;
  uint64_t gen = generation_;
  std::thread([this, pid, gen] {
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    Action a(Action::Type::kQemuExited);
    a.generation = gen;
    a.exit_status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    Enqueue(std::move(a));
  }).detach();

  ASSIGN_OR_RETURN(qmp_, QmpClient::Connect(paths_.qmp_socket, std::chrono::seconds(30)));
  EndPhase("qemu-start");
  qmp_up_ = Clock::now();
  if (plan.spec.free_page_reporting) {
    // The balloon QEMU made, read back: freed guest pages go back to the host (docs/design.md
    // "Memory"); a QEMU without the property is logged, not fatal (memory, not a boundary).
    auto fpr = qmp_->Execute("qom-get", {{"path", kBalloonQomPath},
                                         {"property", "free-page-reporting"}});
    Log(std::string("balloon: free page reporting ") +
        (fpr.ok() && fpr->is_boolean() && fpr->get<bool>() ? "on" : "NOT on") +
        (fpr.ok() ? "" : " (" + fpr.error().message() + ")"));
  }
  top_nodes_ = {{kSystemNode, kSystemNode}, {kHomeNode, kHomeNode}};
  if (resume) {
    RETURN_IF_ERROR(Resume());
    EndPhase("resume");
  }

  // The channel: QEMU listens on channel.sock; one connection carries the multiplexer.
  ASSIGN_OR_RETURN(int chan_fd, ConnectUnix(paths_.channel_socket));
  channel::MuxOptions mo;
  mo.role = channel::MuxRole::kHost;
  mo.max_streams = protocol::kHostChannelStreams;
  mo.log = [](std::string_view line) { Log("channel: " + std::string(line)); };
  mo.on_ready = [this, gen](const std::string& info) {
    Action a(Action::Type::kReady);
    a.generation = gen;
    a.info = info;
    Enqueue(std::move(a));
  };
  mo.on_closed = [this, gen](const Error& why) {
    Action a(Action::Type::kChannelClosed);
    a.generation = gen;
    a.info = why.message();
    Enqueue(std::move(a));
  };
  ASSIGN_OR_RETURN(std::unique_ptr<channel::Mux> mux, channel::Mux::Create(chan_fd, mo));
  {
    std::shared_ptr<Egress> egress = egress_;
    // Both take ownership of fd; the stream's end tells the trace a reset or a closed channel.
    using StreamEndPtr = std::shared_ptr<const channel::StreamEnd>;
    mux->RegisterStreamService(
        kProxyService, [egress](int fd, const std::vector<std::string>&, StreamEndPtr end) {
          egress->Serve(fd, std::move(end));
        });
    mux->RegisterStreamService(
        kEgressService, [egress](int fd, const std::vector<std::string>&, StreamEndPtr end) {
          egress->ServeTransparent(fd, std::move(end));
        });
    std::shared_ptr<sshagent::SignOnlyAgent> agent = ssh_agent_;
    mux->RegisterService(protocol::kSshAgentService, [agent](int fd, const std::vector<std::string>&) {
      // Handlers run on the mux's loop thread, which also carries this stream's bytes: serve the
      // connection (blocking, and up to a minute per confirmed signature) on a thread of its own.
      // Mux::Stop closes the stream, which ends the thread.
      std::thread([agent, fd] {
        // Without a workspace key there is nothing to offer: the guest's ssh sees a closed agent.
        if (agent) (void)sshagent::ServeAgentConnection(fd, *agent);
        close(fd);
      }).detach();
    });
    // The browser's DevTools (supervisor/browser_vm.h): each connection the guest accepts on its
    // 127.0.0.1:9222 is spliced by the host to the browser VM's Chromium, or closed without one.
    std::shared_ptr<BrowserVm> browser = browser_;
    mux->RegisterService(protocol::kCdpService, [browser](int fd, const std::vector<std::string>&) {
      browser->ConnectCdp(fd);  // takes ownership of fd; does not block
    });
    // SECURITY: only a workspace that opted in (--auto-ports) takes the guest's reports; they
    // name guest ports only, bounded and rate-limited (PortForwarder::ServeReports).
    if (auto_ports_) {
      std::shared_ptr<PortForwarder> ports = ports_;
      mux->RegisterService(protocol::kPortsReportService,
                           [ports](int fd, const std::vector<std::string>&) {
                             std::thread([ports, fd] {
                               ports->ServeReports(fd, std::chrono::milliseconds(250));
                             }).detach();
                           });
    }
  }
  RETURN_IF_ERROR(mux->Start());
  {
    std::lock_guard<std::mutex> l(mu_);
    mux_ = std::move(mux);
    if (resume) phase_ = Phase::kRunning;
  }
  if (opts_.progress_fd >= 0) {
    std::string line = "launched " + std::to_string(qemu_pid_) + "\n";
    (void)!write(opts_.progress_fd, line.data(), line.size());
  }
  if (resume) {
    Progress("resumed");
    SendTimings({}, std::nullopt);
    FinishProgress("ready resumed");
    deadline_.reset();
  } else {
    Progress("booting; waiting for the guest agent");
    deadline_ = Clock::now() + opts_.ready_timeout;
  }
  return OkStatus();
}

Status Supervisor::Resume() {
  int fd = open(paths_.suspend_state.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoError("open " + paths_.suspend_state, errno);
  auto got = qmp_->Execute("getfd", {{"fdname", "incoming"}}, std::chrono::seconds(10), fd);
  close(fd);
  if (!got.ok()) return got.error();
  RETURN_IF_ERROR(qmp_->Execute("migrate-incoming", {{"uri", "fd:incoming"}}));
  auto deadline = Clock::now() + std::chrono::minutes(5);
  auto poll = std::chrono::milliseconds(5);
  while (true) {
    ASSIGN_OR_RETURN(json mig, qmp_->Execute("query-migrate"));
    std::string status = JsonString(mig, "status");
    if (status == "completed") break;
    if (status == "failed" || status == "cancelled") {
      return Error(ErrorCode::kCorrupt, "resume failed: loading the saved state " + status,
                   "delete " + paths_.suspend_state + " to boot afresh (its RAM is lost)");
    }
    if (Clock::now() > deadline) return Error(ErrorCode::kUnavailable, "resume timed out");
    // Waiting for QEMU to load the RAM image: poll its status with a bounded deadline, every
    // 5 ms doubling to 50 ms (a fixed 50 ms cost a resume 25 ms on average after the load).
    std::this_thread::sleep_for(poll);
    poll = std::min(poll * 2, std::chrono::milliseconds(50));
  }
  // The state was saved from a stopped VM, so it loads paused.
  ASSIGN_OR_RETURN(json st, qmp_->Execute("query-status"));
  if (JsonString(st, "status") != "running") RETURN_IF_ERROR(qmp_->Execute("cont"));
  if (unlink(paths_.suspend_state.c_str()) != 0) Log("warning: could not delete suspend state");
  unlink(SuspendKernelPath().c_str());
  return OkStatus();
}

// Puts read-write and read-only fds of `path` into a new fd set of the running QEMU (QMP add-fd)
// and returns its "/dev/fdset/N" name.
Result<std::string> Supervisor::PassToQmp(const std::string& path) {
  std::optional<int64_t> set;
  for (int flags : {O_RDWR, O_RDONLY}) {
    int fd = open(path.c_str(), flags | O_CLOEXEC);
    if (fd < 0) return ErrnoError("open " + path, errno);
    json args = json::object();
    if (set) args["fdset-id"] = *set;
    auto added = qmp_->Execute("add-fd", args, std::chrono::seconds(10), fd);
    close(fd);
    if (!added.ok()) return added.error();
    auto id = added->find("fdset-id");
    if (id == added->end() || !id->is_number_integer()) {
      return Error(ErrorCode::kInternal, "QMP add-fd: no fdset-id in the reply");
    }
    set = id->get<int64_t>();
  }
  return "/dev/fdset/" + std::to_string(*set);
}

// A crash-consistent checkpoint of the running VM: both new overlays are added first, then ONE
// QMP transaction switches system disk and home to them at the same instant (QEMU drains the
// block layer for it), so the frozen layers are what the disks held at one moment, as after a
// power cut. The guest runs on throughout.
Result<CheckpointRecord> Supervisor::TakeLiveCheckpoint(CheckpointOptions options) {
  ASSIGN_OR_RETURN(PreparedCheckpoint prepared, store_->PrepareCheckpoint(*lock_, options));
  std::vector<std::string> added;
  auto fail = [&](const Error& e) -> Error {
    for (const std::string& node : added) (void)qmp_->Execute("blockdev-del", {{"node-name", node}});
    (void)store_->AbortCheckpoint(*lock_, prepared);
    return e;
  };
  json actions = json::array();
  std::map<std::string, std::string> new_tops;
  for (const auto& disk : prepared.disks) {
    std::string base = disk.disk == DiskKind::kSystem ? kSystemNode : kHomeNode;
    std::string node = base + "-" + prepared.id;
    for (char& c : node) if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-') c = '-';
    // SECURITY: QEMU cannot open files by path (vm/qemu_access.h): pass the new overlay's fds.
    auto fdset = PassToQmp(disk.new_top_path);
    if (!fdset.ok()) return fail(fdset.error());
    // Both disks' new tops pass the guest's discards down, as at boot (vm/qemu_args.cc).
    json add = {{"driver", "qcow2"},
                {"node-name", node},
                {"file", {{"driver", "file"}, {"filename", *fdset}, {"discard", "unmap"}}},
                {"backing", nullptr},
                {"discard", "unmap"},
                {"detect-zeroes", "unmap"}};
    auto ok = qmp_->Execute("blockdev-add", add);
    if (!ok.ok()) return fail(ok.error());
    added.push_back(node);
    actions.push_back({{"type", "blockdev-snapshot"},
                       {"data", {{"node", top_nodes_[base]}, {"overlay", node}}}});
    new_tops[base] = node;
  }
  auto snap = qmp_->Execute("transaction", {{"actions", actions}});
  if (!snap.ok()) return fail(snap.error());
  for (const auto& [base, node] : new_tops) top_nodes_[base] = node;
  return store_->CommitCheckpoint(*lock_, prepared, true);
}

Status Supervisor::TakeProvenBootCheckpoint() {
  ASSIGN_OR_RETURN(CheckpointRecord rec, TakeLiveCheckpoint(CheckpointOptions{.automatic = true}));
  std::lock_guard<std::mutex> l(mu_);
  last_checkpoint_ = rec.id;
  return OkStatus();
}

Status Supervisor::Suspend() {
  std::string tmp = paths_.suspend_state + ".tmp";
  int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return ErrnoError("create " + tmp, errno);
  auto fail = [&](const Error& e) -> Status {
    unlink(tmp.c_str());
    (void)qmp_->Execute("cont");
    return e;
  };
  RETURN_IF_ERROR(qmp_->Execute("stop"));
  // SECURITY: -sandbox spawn=deny forbids exec: URIs; QEMU writes the RAM image to an fd we pass.
  auto got = qmp_->Execute("getfd", {{"fdname", "suspend"}}, std::chrono::seconds(10), fd);
  if (!got.ok()) {
    close(fd);
    return fail(got.error());
  }
  auto mig = qmp_->Execute("migrate", {{"uri", "fd:suspend"}});
  if (!mig.ok()) {
    close(fd);
    return fail(mig.error());
  }
  auto deadline = Clock::now() + std::chrono::minutes(10);
  while (true) {
    auto st = qmp_->Execute("query-migrate");
    if (!st.ok()) {
      close(fd);
      return fail(st.error());
    }
    std::string s = JsonString(*st, "status");
    if (s == "completed") break;
    if (s == "failed" || s == "cancelled" || Clock::now() > deadline) {
      close(fd);
      return fail(Error(ErrorCode::kIo, "saving the VM state failed (migration " + s + ")"));
    }
    // Waiting for QEMU to finish writing: poll with a bounded deadline.
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  if (fsync(fd) != 0) {
    int err = errno;
    close(fd);
    return fail(ErrnoError("fsync " + tmp, err));
  }
  close(fd);
  // Before the state appears: a state is never without the note of how its kernel was entered.
  if (Status k = WriteFileAtomic(SuspendKernelPath(), KernelBootName(kernel_boot_), 0600); !k.ok()) {
    return fail(k.error());
  }
  if (rename(tmp.c_str(), paths_.suspend_state.c_str()) != 0) return fail(ErrnoError("rename", errno));
  (void)qmp_->Execute("quit");
  return OkStatus();
}

void Supervisor::ReplyAll(std::vector<std::shared_ptr<std::promise<json>>>& waiters,
                          const json& reply) {
  for (auto& w : waiters) w->set_value(reply);
  waiters.clear();
}

// The dispatcher: every queued action is checked against the lifecycle table (legal in this
// state? which state next?) before its effect runs; a refusal is the table's error text and hint.
void Supervisor::Handle(Action a) {
  using T = Action::Type;
  Phase phase;
  std::string pause_reason;
  {
    std::lock_guard<std::mutex> l(mu_);
    phase = phase_;
    pause_reason = pause_reason_;
  }
  auto set_phase = [&](Phase p) {
    std::lock_guard<std::mutex> l(mu_);
    phase_ = p;
    phase = p;
  };
  // Events of an earlier QEMU (before a reboot) are stale: dropped.
  if ((a.type == T::kReady || a.type == T::kQemuExited || a.type == T::kChannelClosed) &&
      a.generation != generation_) {
    return;
  }
  auto decided = lifecycle::Decide(phase, a.type, opts_.name, pause_reason);
  if (!decided.ok()) {
    if (a.reply) {
      a.reply->set_value(ErrorReply(decided.error()));
    } else {
      Log(std::string("ignored ") + lifecycle::ActionName(a.type) + ": " +
          decided.error().message());
    }
    return;
  }
  const lifecycle::Rule rule = *decided;
  switch (a.type) {
    case T::kReady: {
      Log("guest agent ready: " + a.info);
      // SECURITY: the READY text is the guest's; its marks are parsed with bounds
      // (supervisor/boot_timings.h) and only ever printed as numbers.
      std::vector<BootPhase> guest;
      if (auto marks = ParseGuestMarks(a.info); marks.ok()) {
        guest = GuestPhases(*marks, std::chrono::duration_cast<std::chrono::milliseconds>(
                                        a.at - qmp_up_).count());
      } else {
        Log("timing: " + marks.error().message());
      }
      Progress("taking the proven-boot checkpoint");
      Clock::time_point cp = Clock::now();
      if (Status st = TakeProvenBootCheckpoint(); !st.ok()) {
        Log("warning: proven-boot checkpoint failed: " + st.error().ToString());
      }
      set_phase(rule.next);
      deadline_.reset();
      SendTimings(guest, BootPhase{"checkpoint", std::chrono::duration_cast<std::chrono::milliseconds>(
                                                     Clock::now() - cp).count()});
      Progress("ready");
      FinishProgress("ready " + a.info);
      ReplyAll(ready_waiters_, StatusReply());
      return;
    }
    case T::kChannelClosed:
      Log("channel closed: " + a.info);
      return;
    case T::kQemuExited: {
      Log("QEMU exited with status " + std::to_string(a.exit_status));
      // The browser VM goes with the workspace's VM (its egress proxy is restarted at a reboot).
      if (browser_) (void)browser_->Stop();
      qemu_pid_ = -1;
      qmp_.reset();
      std::shared_ptr<channel::Mux> mux;
      {
        std::lock_guard<std::mutex> l(mu_);
        mux = std::move(mux_);
      }
      if (mux) mux->Stop();
      if (phase == Phase::kRebooting) {
        if (Status st = Boot(false); !st.ok()) {
          ReplyAll(ready_waiters_, ErrorReply(st.error()));
          set_phase(Phase::kStopped);
          exit_code_ = 1;
        }
        return;
      }
      if (phase == Phase::kBooting) {
        FailBoot(Error(ErrorCode::kUnavailable,
                       "QEMU exited during boot (status " + std::to_string(a.exit_status) + ")",
                       "boot log: " + paths_.console_log + "; QEMU's messages: " +
                           paths_.supervisor_log));
        ReplyAll(ready_waiters_, ErrorReply(Error(ErrorCode::kUnavailable, "QEMU exited during boot")));
      }
      set_phase(rule.next);
      ReplyAll(stop_waiters_, {{"ok", true}, {"state", "stopped"}});
      return;
    }
    case T::kCompromised: {
      // The proxy caught a placeholder heading out of its scope: the store is already marked
      // (refusing every later start); freeze the guest now, keeping its state for inspection.
      if (rule.verdict == lifecycle::Verdict::kAlready) return;
      const bool was_booting = phase == Phase::kBooting;
      {
        std::lock_guard<std::mutex> l(mu_);
        pause_reason_ = a.info;
        if (rule.next == Phase::kPaused) stage_ = a.info;
      }
      // SECURITY: the new state first, before the guest is frozen and its streams closed: from
      // here on `status`, `open-stream` and a CLI whose session just ended (it asks why) all see
      // paused, never a running VM that stopped answering.
      set_phase(rule.next);
      Log("COMPROMISE: " + a.info + "; pausing the VM (`cloister wipe " + opts_.name + "`)");
      if (qmp_) {
        if (auto st = qmp_->Execute("stop"); !st.ok()) Log("pause failed: " + st.error().ToString());
      }
      // SECURITY: every open exec and attach session ends now (the frozen guest would never
      // answer them): stopping the channel closes every stream; the CLI names why and the fix.
      std::shared_ptr<channel::Mux> mux;
      {
        std::lock_guard<std::mutex> l(mu_);
        mux = std::move(mux_);
      }
      if (mux) mux->Stop();
      // SECURITY: the browser VM shares the tripped proxy: it goes now, with its disk.
      if (browser_) (void)browser_->Stop();
      Error paused = lifecycle::Refusal(Phase::kPaused, T::kExec, opts_.name, a.info);
      if (was_booting) {
        // `start` is waiting for READY: tell it now (the supervisor stays, the VM frozen).
        FinishProgress("paused " + paused.message() + "\t" + paused.hint());
      }
      ReplyAll(ready_waiters_, ErrorReply(paused));
      if (rule.next == Phase::kPaused) deadline_.reset();  // frozen until stop or wipe
      return;
    }
    case T::kStop:
    case T::kForceStop: {
      if (a.reply) stop_waiters_.push_back(a.reply);
      if (phase == Phase::kStopped || phase == Phase::kSuspended) {
        ReplyAll(stop_waiters_, {{"ok", true}, {"state", "stopped"}});
        return;
      }
      // Booting guests may not handle ACPI yet, and a paused one cannot: a stop is a kill.
      if (a.type == T::kForceStop || phase == Phase::kBooting || phase == Phase::kPaused || !qmp_) {
        if (phase == Phase::kBooting && a.type != T::kForceStop) Log("stop during boot: killing QEMU");
        if (qemu_pid_ > 0) kill(qemu_pid_, SIGKILL);
        if (phase == Phase::kBooting) {
          FailBoot(Error(ErrorCode::kCancelled, "stopped while booting", "`cloister start " +
                                                                             opts_.name + "`"));
        }
        set_phase(rule.next);
        return;
      }
      if (rule.verdict == lifecycle::Verdict::kAlready) return;  // already on its way
      set_phase(rule.next);
      Progress("powering off (ACPI and guest agent)");
      if (auto r = qmp_->Execute("system_powerdown"); !r.ok()) {
        Log("system_powerdown failed: " + r.error().ToString());
      }
      GuestPoweroff();
      deadline_ = Clock::now() + a.timeout;
      return;
    }
    case T::kSuspend: {
      if (rule.verdict == lifecycle::Verdict::kAlready) {
        stop_waiters_.push_back(a.reply);
        return;
      }
      set_phase(rule.next);
      Progress("saving RAM to " + paths_.suspend_state);
      if (Status st = Suspend(); !st.ok()) {
        set_phase(Phase::kRunning);
        a.reply->set_value(ErrorReply(st.error()));
        return;
      }
      stop_waiters_.push_back(a.reply);
      deadline_ = Clock::now() + std::chrono::seconds(30);  // QEMU quits after the save
      return;
    }
    case T::kReboot: {
      set_phase(rule.next);
      ready_waiters_.push_back(a.reply);
      Progress("rebooting: powering off (ACPI and guest agent)");
      (void)qmp_->Execute("system_powerdown");
      GuestPoweroff();
      deadline_ = Clock::now() + a.timeout;
      return;
    }
    case T::kLiveCheckpoint: {
      // `checkpoint create` or `fork` of the running workspace: a manual checkpoint (kept until
      // `checkpoint rm`), the guest running on.
      Result<CheckpointRecord> rec = TakeLiveCheckpoint(CheckpointOptions{.automatic = false});
      if (!rec.ok()) {
        Log("live checkpoint failed: " + rec.error().ToString());
        a.reply->set_value(ErrorReply(rec.error()));
        return;
      }
      Log("live checkpoint " + rec->id);
      a.reply->set_value({{"ok", true}, {"id", rec->id}});
      return;
    }
    default:
      // Requests that change nothing (status, exec, attach, ssh-confirm) are decided by the same
      // table on the connection thread (HandleConnection); settings and disk verbs never reach
      // the supervisor.
      if (a.reply) {
        a.reply->set_value(ErrorReply(Error(ErrorCode::kInternal,
                                            std::string("not a queued action: ") +
                                                lifecycle::ActionName(a.type))));
      }
      return;
  }
}

// Asks the guest agent to power off (as root), alongside the ACPI button: images without an ACPI
// daemon (the busybox test image) still shut down cleanly. Best effort, off the main thread.
void Supervisor::GuestPoweroff() {
  std::shared_ptr<channel::Mux> mux;
  {
    std::lock_guard<std::mutex> l(mu_);
    mux = mux_;
  }
  if (!mux) return;
  std::thread([mux] {
    auto fd = mux->Open(protocol::kExecService, {}, std::chrono::seconds(10));
    if (!fd.ok()) return;
    int null_fd = open("/dev/null", O_WRONLY | O_CLOEXEC);
    channel::ExecRequest req;
    req.argv = {"poweroff"};
    req.user = "root";
    channel::ExecIo io;
    io.in = -1;
    io.out = null_fd;
    io.err = null_fd;
    (void)channel::RunExec(*fd, req, io);
    close(*fd);
    close(null_fd);
  }).detach();
}

json Supervisor::StatusReply() {
  std::lock_guard<std::mutex> l(mu_);
  return {{"ok", true},
          {"state", lifecycle::StateName(phase_)},
          {"stage", stage_},
          {"name", opts_.name},
          {"supervisor_pid", getpid()},
          {"qemu_pid", qemu_pid_},
          {"accel", AccelName(opts_.accel)},
          {"boot_id", boot_id_},
          {"last_checkpoint", last_checkpoint_},
          {"ephemeral", ephemeral_},
          {"browser", browser_ ? browser_->StatusJson() : json{{"state", "stopped"}}}};
}

void Supervisor::AcceptLoop() {
  while (true) {
    pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {wake_pipe_[0], POLLIN, 0}};
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (fds[1].revents) return;
    int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    {
      std::lock_guard<std::mutex> l(mu_);
      ++active_connections_;
    }
    std::thread([this, fd] {
      HandleConnection(fd);
      std::lock_guard<std::mutex> l(mu_);
      --active_connections_;
      cv_.notify_all();
    }).detach();
  }
}

void Supervisor::HandleConnection(int fd) {
  LineConn conn(fd);
  auto req = conn.Read(Clock::now() + std::chrono::seconds(10));
  if (!req.ok()) return;
  std::string op = JsonString(*req, "op");
  // Requests that change nothing are decided by the lifecycle table here, under the state's
  // lock, so they answer while the main thread is in a long QMP exchange (boot, suspend).
  auto decide = [&](lifecycle::Action action, std::shared_ptr<channel::Mux>* mux)
      -> Result<lifecycle::Rule> {
    std::lock_guard<std::mutex> l(mu_);
    if (mux) *mux = mux_;
    return lifecycle::Decide(phase_, action, opts_.name, pause_reason_);
  };
  if (op == "status") {
    if (auto d = decide(lifecycle::Action::kStatus, nullptr); !d.ok()) {
      (void)conn.Send(ErrorReply(d.error()));
      return;
    }
    (void)conn.Send(StatusReply());
    return;
  }
  if (op == kSshConfirmOp) {
    if (auto d = decide(lifecycle::Action::kSshConfirm, nullptr); !d.ok()) {
      (void)conn.Send(ErrorReply(d.error()));
      return;
    }
    ssh_confirm_->ServeListener(conn);  // until the listener leaves or Cleanup stops the broker
    return;
  }
  if (op == kConsentListenOp || op == kConsentListOp || op == kConsentAnswerOp ||
      op == kConsentRevokeOp) {
    // Consent changes nothing of the VM's state: decided like ssh-confirm (any live state).
    if (auto d = decide(lifecycle::Action::kSshConfirm, nullptr); !d.ok()) {
      (void)conn.Send(ErrorReply(d.error()));
      return;
    }
    if (op == kConsentListenOp) {
      ConsentBroker::ListenerOptions lo;
      lo.client = JsonString(*req, "client");
      consent_->ServeListener(conn, lo);  // until the listener leaves or Cleanup stops it
      return;
    }
    ucred peer{};
    socklen_t len = sizeof(peer);
    int pid = getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &peer, &len) == 0 ? peer.pid : -1;
    (void)conn.Send(consent_->HandleRequest(*req, pid));
    return;
  }
  if (op == kPortsControlOp) {
    (void)conn.Send(HandlePorts(*req));
    return;
  }
  if (op == kBrowserOp) {
    (void)conn.Send(HandleBrowser(*req));
    return;
  }
  if (op == "open-stream") {
    // Host-opened guest services a CLI may ask for; anything else (a guest-opened service name,
    // a typo) is refused here, so the control socket cannot open streams the design does not name.
    static const std::set<std::string> kOpenable = {protocol::kExecService, protocol::kTcpService,
                                                    protocol::kSshdService};
    std::string service = JsonString(*req, "service");
    if (kOpenable.count(service) == 0) {
      (void)conn.Send(ErrorReply(Error(ErrorCode::kInvalidArgument,
                                       "no guest service '" + service + "' can be opened")));
      return;
    }
    lifecycle::Action action = JsonString(*req, "action") == "attach" ? lifecycle::Action::kAttach
                                                                       : lifecycle::Action::kExec;
    std::shared_ptr<channel::Mux> mux;
    auto d = decide(action, &mux);
    if (!d.ok()) {
      (void)conn.Send(ErrorReply(d.error()));
      return;
    }
    if (d->verdict != lifecycle::Verdict::kGo || !mux) {
      // kWaitReady: the CLI waits for READY before it asks (supervisor/launcher.h); this is the race.
      Phase phase;
      {
        std::lock_guard<std::mutex> l(mu_);
        phase = phase_;
      }
      (void)conn.Send(ErrorReply(Error(ErrorCode::kBusy,
                                       opts_.name + " is " + lifecycle::StateName(phase) +
                                           ": the guest agent is not ready yet",
                                       "try again when `cloister ls` says running")));
      return;
    }
    std::vector<std::string> args;
    if (auto a = req->find("args"); a != req->end() && a->is_array() && a->size() <= 64) {
      for (const auto& s : *a) {
        if (s.is_string()) args.push_back(s.get<std::string>());
      }
    }
    auto stream = mux->Open(service, args, std::chrono::seconds(30));
    if (!stream.ok()) {
      (void)conn.Send(ErrorReply(stream.error()));
      return;
    }
    (void)conn.Send({{"ok", true}}, *stream);
    close(*stream);
    return;
  }
  Action a(Action::Type::kStop);
  if (op == "stop") {
    a.type = Action::Type::kStop;
    if (auto f = req->find("force"); f != req->end() && f->is_boolean() && f->get<bool>()) {
      a.type = Action::Type::kForceStop;
    }
    if (auto t = req->find("timeout_ms"); t != req->end() && t->is_number_unsigned()) {
      a.timeout = std::chrono::milliseconds(std::min<uint64_t>(t->get<uint64_t>(), 3600000));
    }
  } else if (op == "suspend") {
    a.type = Action::Type::kSuspend;
  } else if (op == "reboot") {
    a.type = Action::Type::kReboot;
    a.timeout = std::chrono::seconds(60);
  } else if (op == kCheckpointOp) {
    a.type = Action::Type::kLiveCheckpoint;
  } else {
    (void)conn.Send(ErrorReply(Error(ErrorCode::kInvalidArgument, "unknown request '" + op + "'")));
    return;
  }
  a.reply = std::make_shared<std::promise<json>>();
  auto future = a.reply->get_future();
  Enqueue(std::move(a));
  (void)conn.Send(future.get());
}

// The control op "ports": {"action":"ls"} | {"action":"add","specs":[SPEC...]} |
// {"action":"rm","targets":[{"host_port":N,"host_ip":IP or ""}...]}. ls is a status request;
// add and rm need a live VM (the table's answer for a stream into the guest).
json Supervisor::HandlePorts(const json& req) {
  std::string action = JsonString(req, "action");
  lifecycle::Action la = action == "ls" ? lifecycle::Action::kStatus : lifecycle::Action::kExec;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (auto d = lifecycle::Decide(phase_, la, opts_.name, pause_reason_); !d.ok()) {
      return ErrorReply(d.error());
    }
  }
  json added = json::array();
  if (action == "add") {
    auto specs = req.find("specs");
    if (specs == req.end() || !specs->is_array() || specs->empty() || specs->size() > kMaxForwards) {
      return ErrorReply(Error(ErrorCode::kInvalidArgument, "ports add: no ports"));
    }
    for (const json& s : *specs) {
      if (!s.is_string()) return ErrorReply(Error(ErrorCode::kInvalidArgument, "ports add: bad port"));
      auto spec = ParsePortSpec(s.get<std::string>());
      if (!spec.ok()) return ErrorReply(spec.error());
      auto bound = ports_->AddForward(*spec, ForwardOrigin::kAdded);
      if (!bound.ok()) {
        // All or nothing: the ones this request already bound go again.
        for (const json& a : added) {
          (void)ports_->RemoveForward(a["host_port"].get<uint16_t>(), JsonString(a, "host_ip"));
        }
        return ErrorReply(bound.error());
      }
      Log("ports: published " + bound->ToString() + " (port add)");
      ForwardInfo info;
      info.spec = *bound;
      added.push_back(ForwardInfoJson(info));
    }
  } else if (action == "rm") {
    auto targets = req.find("targets");
    if (targets == req.end() || !targets->is_array() || targets->empty()) {
      return ErrorReply(Error(ErrorCode::kInvalidArgument, "ports rm: no ports"));
    }
    for (const json& t : *targets) {
      auto port = t.find("host_port");
      if (!t.is_object() || port == t.end() || !port->is_number_unsigned() ||
          port->get<uint64_t>() > 65535) {
        return ErrorReply(Error(ErrorCode::kInvalidArgument, "ports rm: bad port"));
      }
      Status st = ports_->RemoveForward(static_cast<uint16_t>(port->get<uint64_t>()),
                                        JsonString(t, "host_ip"));
      if (!st.ok()) {
        Error e = st.error();
        return ErrorReply(Error(e.code(), e.message(), "see `cloister port " + opts_.name + " ls`"));
      }
    }
  } else if (action != "ls") {
    return ErrorReply(Error(ErrorCode::kInvalidArgument, "ports: unknown action '" + action + "'",
                            "ls, add or rm"));
  }
  json list = json::array();
  for (const ForwardInfo& f : ports_->List()) list.push_back(ForwardInfoJson(f));
  return {{"ok", true}, {"ports", list}, {"added", added}, {"auto_ports", auto_ports_}};
}

BrowserSettings Supervisor::CurrentBrowserSettings() {
  std::lock_guard<std::mutex> l(browser_settings_mu_);
  const std::string path = store_->Paths(opts_.name).config;
  struct stat st;
  if (stat(path.c_str(), &st) != 0) return browser_settings_ = BrowserSettings{};
  if (st.st_size == browser_settings_size_ &&
      st.st_mtim.tv_sec == browser_settings_mtime_.tv_sec &&
      st.st_mtim.tv_nsec == browser_settings_mtime_.tv_nsec) {
    return browser_settings_;
  }
  browser_settings_mtime_ = st.st_mtim;
  browser_settings_size_ = st.st_size;
  browser_settings_ = BrowserSettings{};
  auto config = store_->LoadConfig(opts_.name);
  if (!config.ok()) {
    Log("browser: settings unreadable, automatic start off: " + config.error().message());
    return browser_settings_;
  }
  auto settings = BrowserSettingsFromConfig(*config);
  if (!settings.ok()) {
    Log("browser: automatic start off: " + settings.error().message());
    return browser_settings_;
  }
  return browser_settings_ = *settings;
}

// The control op "browser" (supervisor/browser_vm.h): {"action":"status"} any live state;
// {"action":"start","image":PATH,"memory_mib":N,"cpus":N,"keep_profile":BOOL} only while running (the lifecycle
// table, BrowserStartCheck); {"action":"stop"} any live state.
json Supervisor::HandleBrowser(const json& req) {
  std::string action = JsonString(req, "action");
  Phase phase;
  std::string detail;
  std::shared_ptr<Egress> egress;
  {
    std::lock_guard<std::mutex> l(mu_);
    phase = phase_;
    detail = pause_reason_;
    egress = egress_;
  }
  if (action == "status") return {{"ok", true}, {"name", opts_.name}, {"browser", browser_->StatusJson()}};
  if (action == "stop") {
    if (Status st = browser_->Stop(); !st.ok()) return ErrorReply(st.error());
    Log("browser: stopped (browser stop)");
    return {{"ok", true}, {"name", opts_.name}, {"browser", browser_->StatusJson()}};
  }
  if (action != "start") {
    return ErrorReply(Error(ErrorCode::kInvalidArgument, "browser: unknown action '" + action + "'",
                            "start, stop or status"));
  }
  if (Status st = BrowserStartCheck(phase, opts_.name, detail); !st.ok()) return ErrorReply(st.error());
  BrowserStartOptions so;
  so.image_path = JsonString(req, "image");
  if (auto m = req.find("memory_mib"); m != req.end() && m->is_number_unsigned()) {
    so.memory_mib = static_cast<int>(std::min<uint64_t>(m->get<uint64_t>(), 1 << 20));
  }
  if (auto c = req.find("cpus"); c != req.end() && c->is_number_unsigned()) {
    so.cpus = static_cast<int>(std::min<uint64_t>(c->get<uint64_t>(), 1024));
  }
  if (auto k = req.find("keep_profile"); k != req.end() && k->is_boolean()) {
    so.keep_profile = k->get<bool>();
  }
  Log("browser: starting (" + so.image_path + ", " + std::to_string(so.memory_mib) + " MiB, " +
      std::to_string(so.cpus) + " CPUs" + (so.keep_profile ? ", kept profile" : "") + ")");
  auto started = browser_->Start(so, egress);
  if (!started.ok()) return ErrorReply(started.error());
  return {{"ok", true}, {"name", opts_.name}, {"browser", *started}};
}

void Supervisor::SignalLoop() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGHUP);
  while (true) {
    int sig = 0;
    if (sigwait(&set, &sig) != 0) continue;
    Log("signal " + std::to_string(sig) + ": stopping the VM");
    Action a(Action::Type::kStop);
    a.timeout = opts_.stop_timeout;
    Enqueue(std::move(a));
  }
}

void Supervisor::Cleanup() {
  std::shared_ptr<channel::Mux> mux;
  {
    std::lock_guard<std::mutex> l(mu_);
    mux = std::move(mux_);
  }
  if (mux) mux->Stop();
  if (browser_) browser_->Shutdown();  // the browser VM and its directory go with the workspace
  if (ports_) ports_->StopAll();  // the published ports go with the VM
  if (egress_) egress_->Stop();
  if (ssh_confirm_) ssh_confirm_->Stop();
  if (consent_) consent_->Stop();
  if (qemu_pid_ > 0) {
    kill(qemu_pid_, SIGKILL);
    WaitChild(qemu_pid_, std::chrono::seconds(10));
  }
  qmp_.reset();
  // Let connection threads deliver their replies (bounded).
  {
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait_for(l, std::chrono::seconds(3), [this] { return active_connections_ == 0; });
  }
  if (wake_pipe_[1] >= 0) (void)!write(wake_pipe_[1], "x", 1);
  for (const std::string& f : {paths_.qmp_socket, paths_.channel_socket, paths_.supervisor_socket}) {
    unlink(f.c_str());
  }
  // The suspended guest keeps its metadata disk for the resume.
  if (access(paths_.suspend_state.c_str(), F_OK) != 0) unlink(paths_.meta_disk.c_str());
  lock_.reset();
  // QEMU is gone: give up the pid file (unlinked first, so nobody sees it unlocked) before an
  // ephemeral delete, which refuses a workspace whose supervisor still holds it.
  unlink(paths_.supervisor_pid.c_str());
  if (pid_fd_ >= 0) close(pid_fd_);
  pid_fd_ = -1;
  if (ephemeral_ && store_) {
    Log("ephemeral workspace: deleting it");
    if (Status st = store_->Remove(opts_.name); !st.ok() && st.error().code() != ErrorCode::kNotFound) {
      Log("delete failed: " + st.error().ToString());
    }
  }
}

int Supervisor::Run() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  signal(SIGPIPE, SIG_IGN);
  // The progress pipe must not leak into QEMU (it would hold `start` open after ready).
  if (opts_.progress_fd >= 0) fcntl(opts_.progress_fd, F_SETFD, FD_CLOEXEC);
  Log("supervisor for " + opts_.name + " starting (pid " + std::to_string(getpid()) + ")");

  Status st = Init();
  if (st.ok()) st = Boot(/*resume=*/access(paths_.suspend_state.c_str(), F_OK) == 0);
  if (!st.ok()) {
    FailBoot(st.error());
    Cleanup();
    return exit_code_ ? exit_code_ : 1;
  }
  while (true) {
    std::optional<Action> next;
    {
      std::unique_lock<std::mutex> l(mu_);
      // QEMU is gone (the table's kQemuExited leads to stopped or suspended): exit.
      if (phase_ == Phase::kStopped || phase_ == Phase::kSuspended) break;
      auto pred = [this] { return !queue_.empty(); };
      if (deadline_) cv_.wait_until(l, *deadline_, pred);
      else cv_.wait(l, pred);
      if (!queue_.empty()) {
        next = std::move(queue_.front());
        queue_.pop_front();
      }
    }
    if (next) {
      Handle(std::move(*next));
      continue;
    }
    if (!deadline_ || Clock::now() < *deadline_) continue;
    deadline_.reset();
    Phase phase;
    {
      std::lock_guard<std::mutex> l(mu_);
      phase = phase_;
    }
    if (phase == Phase::kBooting) {
      FailBoot(Error(ErrorCode::kUnavailable,
                     "the guest agent did not report ready within " +
                         std::to_string(opts_.ready_timeout.count()) + " s",
                     "boot log: " + paths_.console_log));
      {
        std::lock_guard<std::mutex> l(mu_);
        phase_ = Phase::kStopping;
      }
    } else {
      Log("QEMU did not stop in time: killing it");
    }
    if (qemu_pid_ > 0) kill(qemu_pid_, SIGKILL);
  }
  Cleanup();
  Log("supervisor exiting with " + std::to_string(exit_code_));
  return exit_code_;
}

}  // namespace

int RunSupervisor(const SupervisorOptions& options) {
  Supervisor supervisor(options);
  return supervisor.Run();
}

}  // namespace cloister::vm
