#include "supervisor/browser_vm.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <future>
#include <optional>
#include <random>
#include <sstream>

#include "base/subprocess.h"
#include "browser/profile_disk.h"
#include "protocol/contract.h"
#include "store/config_section.h"
#include "supervisor/boot_plan.h"
#include "supervisor/control.h"
#include "supervisor/kept_profile.h"
#include "supervisor/qemu_launch.h"
#include "supervisor/state.h"
#include "supervisor/workspace.h"

namespace cloister::vm {

namespace fs = std::filesystem;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

// Names inside a browser VM's directory (short: unix socket paths are limited to 107 bytes).
constexpr char kDiskFile[] = "disk.qcow2";
constexpr char kScratchFile[] = "scratch.img";  // vdb without a profile: 1 MiB of zeros
constexpr char kMetaFile[] = "meta.img";
constexpr char kConsoleFile[] = "console.log";
constexpr char kQmpSocket[] = "q.sock";
constexpr char kChannelSocket[] = "c.sock";

std::string RandomMac() {
  std::random_device rd;
  char buf[18];
  snprintf(buf, sizeof buf, "52:54:00:%02x:%02x:%02x", rd() & 0xff, rd() & 0xff, rd() & 0xff);
  return buf;
}

// The last `max` bytes of a file (for the log when a boot fails; the file goes with the dir).
std::string Tail(const std::string& path, size_t max) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  std::string s = ss.str();
  if (s.size() > max) s = s.substr(s.size() - max);
  for (char& c : s) {
    if ((c < 0x20 && c != '\n') || c == 0x7f) c = '?';
  }
  return s;
}

// CLOISTER_BROWSER_FILES: [{path, content, mode, owner}]. Fail closed: malformed refuses the start.
Result<std::vector<MetaConfig::File>> ExtraFilesFromEnv() {
  std::vector<MetaConfig::File> out;
  const char* path = std::getenv(kBrowserFilesEnv);
  if (!path || !*path) return out;
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  json j = json::parse(ss.str(), nullptr, false);
  if (!f || !j.is_array()) {
    return Error(ErrorCode::kInvalidArgument,
                 std::string(kBrowserFilesEnv) + "=" + path + " is not a JSON array of files",
                 "unset it, or write [{\"path\": ..., \"content\": ...}]");
  }
  for (const json& e : j) {
    if (!e.is_object() || JsonString(e, "path").empty() || JsonString(e, "path")[0] != '/' ||
        !e.contains("content") || !e["content"].is_string()) {
      return Error(ErrorCode::kInvalidArgument,
                   std::string(kBrowserFilesEnv) + ": each file needs an absolute path and content");
    }
    MetaConfig::File file;
    file.path = JsonString(e, "path");
    file.content = JsonString(e, "content");
    if (e.contains("mode") && e["mode"].is_number_unsigned()) file.mode = e["mode"].get<unsigned>() & 07777;
    if (!JsonString(e, "owner").empty()) file.owner = JsonString(e, "owner");
    out.push_back(std::move(file));
  }
  return out;
}

}  // namespace

Status ValidateBrowserStartOptions(const BrowserStartOptions& o) {
  if (o.image_path.empty() || o.image_path[0] != '/') {
    return Error(ErrorCode::kInvalidArgument, "browser image '" + o.image_path + "' is not an absolute path",
                 "`cloister image build --browser`, or --image PATH");
  }
  if (o.memory_mib < 256 || o.memory_mib > 65536) {
    return Error(ErrorCode::kInvalidArgument,
                 "browser memory " + std::to_string(o.memory_mib) + " MiB is out of range",
                 "--memory 256..65536 (MiB; default " + std::to_string(kBrowserDefaultMemoryMib) + ")");
  }
  if (o.cpus < 1 || o.cpus > 16) {
    return Error(ErrorCode::kInvalidArgument, "browser cpus " + std::to_string(o.cpus) + " is out of range",
                 "--cpus 1..16 (default " + std::to_string(kBrowserDefaultCpus) + ")");
  }
  return OkStatus();
}

namespace {

json BrowserSettingsToJson(const BrowserSettings& b) {
  return {{"autostart", b.autostart}, {"keep_profile", b.keep_profile}};
}

Status ValidateBrowserSettings(const BrowserSettings&) { return OkStatus(); }

Result<BrowserSettings> BrowserSettingsFromJson(const json& doc) {
  auto bad = [](const std::string& why) {
    return Error(ErrorCode::kCorrupt, "config.json: \"browser\" " + why,
                 "fix or remove the \"browser\" key of the workspace's config.json, or "
                 "`cloister config NAME --browser-autostart off`");
  };
  if (!doc.is_object()) return bad("is not an object");
  BrowserSettings b;
  for (const auto& [key, value] : doc.items()) {
    if (key != "autostart" && key != "keep_profile") return bad("has an unknown key '" + key + "'");
    if (!value.is_boolean()) return bad(key + " is not a boolean");
  }
  b.autostart = doc.value("autostart", false);
  b.keep_profile = doc.value("keep_profile", false);
  return b;
}

const ConfigSection<BrowserSettings>& BrowserSection() {
  static const ConfigSection<BrowserSettings> section{kBrowserConfigKey, BrowserSettingsFromJson,
                                                      BrowserSettingsToJson, ValidateBrowserSettings};
  return section;
}

}  // namespace

Result<BrowserSettings> BrowserSettingsFromConfig(const WorkspaceConfig& config) {
  return LoadConfigSection(BrowserSection(), config);
}

Status PutBrowserSettings(WorkspaceConfig& config, const BrowserSettings& settings) {
  return PutConfigSection(BrowserSection(), config, settings);
}

Result<BrowserSettings> ParseAutostartValue(const std::string& value) {
  if (value == "off") return BrowserSettings{false, false};
  if (value == "on") return BrowserSettings{true, false};
  if (value == "keep-profile") return BrowserSettings{true, true};
  return Error(ErrorCode::kInvalidArgument, "browser autostart '" + value + "' is not a choice",
               "--browser-autostart off, on (a fresh profile each time) or keep-profile");
}

std::string AutostartValue(const BrowserSettings& b) {
  if (!b.autostart) return "off";
  return b.keep_profile ? "keep-profile" : "on";
}

AutostartGate::Decision AutostartGate::OnConnection(Clock::time_point now) {
  // SECURITY: one start at a time; none during the back-off after a failure.
  if (in_flight_) return Decision::kWait;
  if (failures_ > 0 && now < retry_at_) return Decision::kRefuse;
  in_flight_ = true;
  return Decision::kStart;
}

void AutostartGate::Finish(bool ok, Clock::time_point now) {
  in_flight_ = false;
  if (ok) {
    failures_ = 0;
    retry_at_ = {};
    return;
  }
  ++failures_;
  auto delay = kAutostartFirstBackoff;
  for (int i = 1; i < failures_ && delay < kAutostartMaxBackoff; ++i) delay *= 2;
  if (delay > kAutostartMaxBackoff) delay = kAutostartMaxBackoff;
  retry_at_ = now + delay;
}

Status BrowserStartCheck(lifecycle::State state, const std::string& workspace,
                         const std::string& detail) {
  // A browser VM serves a live workspace guest: the table's cell for a stream into the guest.
  ASSIGN_OR_RETURN(lifecycle::Rule rule,
                   lifecycle::Decide(state, lifecycle::Action::kExec, workspace, detail));
  if (rule.verdict != lifecycle::Verdict::kGo) {
    return Error(ErrorCode::kBusy,
                 "cannot start the browser of " + workspace + ": it is " +
                     lifecycle::StateName(state),
                 "wait until `cloister ls` says running, then `cloister browser " + workspace +
                     " start`");
  }
  return OkStatus();
}

std::string StoreTmpDir(const std::string& store_root) {
  return store_root + "/" + kStoreTmpDir;
}

std::vector<std::string> CollectStaleBrowserDirs(const std::string& store_root) {
  std::vector<std::string> removed;
  std::string tmp = StoreTmpDir(store_root);
  DIR* d = opendir(tmp.c_str());
  if (!d) return removed;
  std::vector<std::string> names;
  while (dirent* e = readdir(d)) {
    std::string n = e->d_name;
    if (n.rfind(kBrowserDirPrefix, 0) == 0) names.push_back(n);
  }
  closedir(d);
  for (const std::string& n : names) {
    std::string dir = tmp + "/" + n;
    struct stat st;
    // Never follow a symlink out of the store: only real directories are ours.
    if (lstat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) continue;
    std::string owner = dir + "/" + kBrowserOwnerFile;
    struct stat ost;
    if (lstat(owner.c_str(), &ost) != 0) {
      if (std::time(nullptr) - st.st_mtime < 60) continue;  // a start is making it
    } else if (LivePid(owner) != 0) {
      continue;  // its supervisor holds the lock: alive
    }
    std::error_code ec;
    fs::remove_all(dir, ec);
    if (!ec) removed.push_back(dir);
  }
  return removed;
}

MetaConfig BrowserMetaConfig(const std::string& workspace, const std::string& boot_id,
                             const GuestSetup& guest,
                             const std::vector<MetaConfig::File>& extra_files) {
  MetaConfig meta;
  meta.workspace = workspace + "-browser";
  meta.boot_id = boot_id;
  // SECURITY: the proxy's settings and CA only; no placeholder, credential file or SSH socket
  // (the browser needs none; whatever it sends still crosses the same proxy and detector).
  std::map<std::string, std::string> proxy_env = ProxyEnvironment();
  for (const auto& [k, v] : guest.env) {
    if (proxy_env.count(k)) meta.env[k] = v;
  }
  meta.ca_certificate = guest.ca_pem;
  meta.files = extra_files;
  meta.tool = "shell";
  meta.forwards = {{protocol::kGuestProxyListen, protocol::kProxyService}};
  meta.browser = MetaBrowser{protocol::kBrowserCdpPort, ""};
  return meta;
}

void RegisterBrowserServices(channel::Mux& mux, channel::ServiceHandler proxy,
                             channel::ServiceHandler egress) {
  // SECURITY: nothing else: ssh-agent, cdp, ports-report and every other name get OPEN_FAIL.
  mux.RegisterService(protocol::kProxyService, std::move(proxy));
  mux.RegisterService(protocol::kEgressService, std::move(egress));
}

struct BrowserVm::Running {
  std::string dir;
  int owner_fd = -1;
  pid_t qemu_pid = -1;
  bool exited = false;
  int exit_status = 0;
  bool ready = false;
  bool torn_down = false;
  std::unique_ptr<QmpClient> qmp;
  std::shared_ptr<channel::Mux> mux;
  BrowserStartOptions options;
  std::time_t started = 0;
};

BrowserVm::BrowserVm(Options options) : opts_(std::move(options)) {
  owner_ = std::thread([this] { OwnerLoop(); });
}

BrowserVm::~BrowserVm() { Shutdown(); }

void BrowserVm::Log(const std::string& line) const {
  if (opts_.log) opts_.log("browser: " + line);
}

void BrowserVm::OwnerLoop() {
  std::unique_lock<std::mutex> l(mu_);
  while (true) {
    cv_.wait(l, [this] { return quit_ || !jobs_.empty(); });
    if (jobs_.empty() && quit_) return;
    std::function<void()> job = std::move(jobs_.front());
    jobs_.pop_front();
    l.unlock();
    job();
    l.lock();
  }
}

void BrowserVm::RunOnOwner(std::function<void()> job) {
  std::promise<void> done;
  std::future<void> f = done.get_future();
  {
    std::lock_guard<std::mutex> l(mu_);
    if (quit_) return;
    jobs_.push_back([&] {
      job();
      done.set_value();
    });
  }
  cv_.notify_all();
  f.wait();
}

Result<json> BrowserVm::Start(const BrowserStartOptions& options, std::shared_ptr<Egress> egress) {
  RETURN_IF_ERROR(ValidateBrowserStartOptions(options));
  if (!egress) return Error(ErrorCode::kUnavailable, "the workspace's egress proxy is not running");
  auto run = std::make_shared<Running>();
  {
    std::lock_guard<std::mutex> l(mu_);
    if (quit_) return Error(ErrorCode::kUnavailable, "the supervisor is stopping");
    if (run_ || starting_) {
      return Error(ErrorCode::kAlreadyExists,
                   "the browser VM of " + opts_.workspace + " is already " +
                       (starting_ ? "starting" : "running"),
                   "one per workspace: `cloister browser " + opts_.workspace + " stop` first");
    }
    starting_ = true;
  }
  Status st = StartLocked(options, std::move(egress), run);
  json status;
  {
    std::lock_guard<std::mutex> l(mu_);
    starting_ = false;
    if (st.ok()) status = StatusJsonLocked(run);
  }
  DrainPending();  // streams that waited for this start (joined now, or closed if it failed)
  if (!st.ok()) return st.error();
  return status;
}

Status BrowserVm::StartLocked(const BrowserStartOptions& options, std::shared_ptr<Egress> egress,
                              std::shared_ptr<Running> run) {
  run->options = options;
  auto fail = [&](const Error& e) -> Status {
    Teardown(run);
    return e;
  };
  fs::path image(options.image_path);
  WorkspaceConfig image_config;
  image_config.name = opts_.workspace;
  image_config.image.path = options.image_path;
  ASSIGN_OR_RETURN(KernelFiles kernel, KernelFilesFor(image_config));
  struct stat ist;
  if (stat(options.image_path.c_str(), &ist) != 0 || !S_ISREG(ist.st_mode)) {
    return Error(ErrorCode::kNotFound, "browser image " + options.image_path + " is missing",
                 "`cloister image build --browser`");
  }

  // The temporary directory: `<store>/tmp/browser-<ws>-XXXXXX/`, 0700, owner lock first (a
  // directory without one is left alone for a minute by CollectStaleBrowserDirs).
  std::string tmp = StoreTmpDir(opts_.store_root);
  if (mkdir(tmp.c_str(), 0700) != 0 && errno != EEXIST) return ErrnoError("create " + tmp, errno);
  std::string templ = tmp + "/" + kBrowserDirPrefix + opts_.workspace + "-XXXXXX";
  std::vector<char> buf(templ.begin(), templ.end());
  buf.push_back('\0');
  if (mkdtemp(buf.data()) == nullptr) return ErrnoError("create " + templ, errno);
  run->dir = buf.data();
  auto owned = ClaimPidFile(run->dir + "/" + kBrowserOwnerFile);
  if (!owned.ok()) return fail(owned.error());
  run->owner_fd = *owned;
  const std::string disk = run->dir + "/" + kDiskFile;
  const std::string scratch = run->dir + "/" + kScratchFile;

  // SECURITY: the browser image is the overlay's read-only backing (QEMU gets the chain as
  // explicit read-only nodes, vm/qemu_access.h); all writes land in the overlay, deleted at stop.
  auto created = RunProcessChecked({"qemu-img", "create", "-q", "-f", "qcow2", "-F", "raw", "-b",
                                    options.image_path, disk});
  if (!created.ok()) return fail(created.error().WithContext("browser disk"));
  {
    int fd = open(scratch.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0 || ftruncate(fd, 1 << 20) != 0) {
      int err = errno;
      if (fd >= 0) close(fd);
      return fail(ErrnoError("create " + scratch, err));
    }
    close(fd);
  }

  auto extra = ExtraFilesFromEnv();
  if (!extra.ok()) return fail(extra.error());
  BootPlan plan;
  plan.meta = BrowserMetaConfig(opts_.workspace, NewBootId(), egress->guest(), *extra);
  plan.meta_disk = run->dir + "/" + kMetaFile;
  plan.build_meta_disk = true;
  VmSpec& spec = plan.spec;
  spec.name = opts_.workspace + "-browser";
  spec.accel = opts_.accel;
  spec.cpus = options.cpus;
  spec.memory_mib = options.memory_mib;
  spec.mac = RandomMac();
  spec.channel_socket = run->dir + "/" + kChannelSocket;
  spec.qmp_socket = run->dir + "/" + kQmpSocket;
  spec.sandbox = opts_.sandbox;
  if (const char* cpu = std::getenv("CLOISTER_TCG_CPU"); cpu && *cpu) spec.tcg_cpu = cpu;
  plan.backing_dirs = {run->dir};
  plan.backing_files = {options.image_path};
  using Slot = BootFd::Slot;
  using How = BootFd::How;
  plan.fds.push_back({Slot::kSystemDisk, How::kFdSet, disk, O_RDWR, "qcow2"});
  plan.fds.push_back({Slot::kHomeDisk, How::kFdSet, scratch, O_RDWR, "raw"});
  plan.fds.push_back({Slot::kMetaDisk, How::kFdSet, plan.meta_disk, O_RDONLY});
  plan.fds.push_back({Slot::kKernel, How::kProcPath, kernel.kernel, O_RDONLY, "", true});
  plan.fds.push_back({Slot::kInitrd, How::kProcPath, kernel.initrd, O_RDONLY, "", true});
  const std::string console = run->dir + "/" + kConsoleFile;
  plan.fds.push_back({Slot::kConsoleLog, How::kFdSet, console, O_WRONLY | O_APPEND});
  plan.truncate_console_log = true;

  // The kept profile (browser/profile_disk.h). The supervisor holds the workspace lock for its
  // whole life, which EnsureProfileDisk's contract asks for. SECURITY: fail closed: a disk that
  // cannot be made or checked fails the start (no silent tmpfs instead).
  std::optional<browser::ProfileDisk> profile;
  if (options.keep_profile) {
    if (opts_.keys_dir.empty() || opts_.workspace_dir.empty()) {
      return fail(Error(ErrorCode::kFailedPrecondition,
                        "--keep-profile: this supervisor does not know the workspace's vault"));
    }
    auto ensured = browser::EnsureProfileDisk(
        browser::ProfileLocation{opts_.keys_dir, opts_.workspace_dir, opts_.workspace});
    if (!ensured.ok()) return fail(ensured.error().WithContext("--keep-profile"));
    profile.emplace(std::move(*ensured));
    // The guest agent finds the disk by its serial (the hot-added disk's vdX name is not fixed).
    plan.meta.browser->profile_device = std::string("serial:") + browser::kProfileSerial;
    spec.start_paused = true;  // attached before the guest's first instruction
    spec.hotplug_root_port = kProfileRootPort;
  }

  QemuLaunchOptions launch;
  launch.output_path = opts_.output_path;
  launch.log = [this](const std::string& l) { Log(l); };
  launch.qemu_id = opts_.qemu_id;
  Result<pid_t> pid = Error(ErrorCode::kInternal, "browser VM: not launched");
  // PR_SET_PDEATHSIG follows the forking thread: fork from the owner thread, which lives as long
  // as this BrowserVm (the supervisor).
  RunOnOwner([&] { pid = LaunchQemu(plan, launch); });
  if (!pid.ok()) return fail(pid.error().WithContext("browser VM"));
  {
    std::lock_guard<std::mutex> l(mu_);
    run->qemu_pid = *pid;
    run->started = std::time(nullptr);
  }
  Log("QEMU " + std::to_string(*pid) + " started in " + run->dir);
  pid_t qpid = *pid;
  std::thread([this, run, qpid] {
    int status = 0;
    while (waitpid(qpid, &status, 0) < 0 && errno == EINTR) {
    }
    bool gone_by_itself = false;
    {
      std::lock_guard<std::mutex> l(mu_);
      run->exited = true;
      run->exit_status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      if (run_ == run) {
        run_.reset();
        gone_by_itself = true;
      }
    }
    cv_.notify_all();
    Log("QEMU exited with status " + std::to_string(WIFEXITED(status) ? WEXITSTATUS(status)
                                                                      : 128 + WTERMSIG(status)));
    if (gone_by_itself) Teardown(run);
  }).detach();

  auto qmp = QmpClient::Connect(spec.qmp_socket, std::chrono::seconds(30));
  if (!qmp.ok()) return fail(qmp.error().WithContext("browser VM QMP"));
  run->qmp = std::move(*qmp);
  if (profile) {
    // SECURITY: the key goes to QEMU as a QMP `secret` object on this socket only (AttachProfile);
    // a failure stops the start here (the paused QEMU is killed by fail()).
    browser::AttachOptions ao;
    ao.bus = kProfileRootPort;
    if (Status at = browser::AttachProfile(*run->qmp, *profile, ao); !at.ok()) {
      return fail(at.error().WithContext("--keep-profile: attaching the profile disk"));
    }
    profile.reset();  // wipes the host's copy of the key
    auto cont = run->qmp->Execute("cont");
    if (!cont.ok()) return fail(cont.error().WithContext("browser VM: QMP cont"));
    Log("profile disk attached (kept profile); QEMU continued");
  }
  auto chan = ConnectUnix(spec.channel_socket);
  if (!chan.ok()) return fail(chan.error().WithContext("browser VM channel"));
  channel::MuxOptions mo;
  mo.role = channel::MuxRole::kHost;
  mo.max_streams = protocol::kHostChannelStreams;
  mo.log = [this](std::string_view line) { Log("channel: " + std::string(line)); };
  std::weak_ptr<Running> weak = run;
  mo.on_ready = [this, weak](const std::string& info) {
    auto r = weak.lock();
    if (!r) return;
    Log("guest agent ready: " + info);
    {
      std::lock_guard<std::mutex> l(mu_);
      r->ready = true;
    }
    cv_.notify_all();
  };
  mo.on_closed = [this](const Error& why) { Log("channel closed: " + why.message()); };
  auto mux = channel::Mux::Create(*chan, mo);
  if (!mux.ok()) return fail(mux.error());
  RegisterBrowserServices(
      **mux,
      [egress](int fd, const std::vector<std::string>&) { egress->Serve(fd, kBrowserTraceSource); },
      [egress](int fd, const std::vector<std::string>&) {
        egress->ServeTransparent(fd, kBrowserTraceSource);
      });
  run->mux = std::shared_ptr<channel::Mux>(std::move(*mux));
  if (Status ms = run->mux->Start(); !ms.ok()) return fail(ms.error());

  // READY: the guest agent's, sent once Chromium's DevTools port accepts (browser-contract).
  bool ready = false, exited = false, quit = false;
  {
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait_until(l, Clock::now() + opts_.ready_timeout,
                   [&] { return run->ready || run->exited || quit_; });
    ready = run->ready;
    exited = run->exited;
    quit = quit_;
    if (ready && !exited && !quit) run_ = run;
  }
  if (!ready || exited || quit) {
    Log("boot failed; its console:\n" + Tail(console, 4096));
    std::string why = exited ? "its QEMU exited during boot"
                      : quit ? "the supervisor is stopping"
                             : "its guest agent did not report ready within " +
                                   std::to_string(opts_.ready_timeout.count()) + " s";
    return fail(Error(ErrorCode::kUnavailable, "the browser VM did not start: " + why,
                      "its console is in the workspace's supervisor log (`cloister logs " +
                          opts_.workspace + " --supervisor`)"));
  }
  return OkStatus();
}

void BrowserVm::Teardown(const std::shared_ptr<Running>& run) {
  bool flush = false;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (run->torn_down) return;
    run->torn_down = true;
    flush = run->options.keep_profile && run->ready && !run->exited && run->mux;
  }
  if (flush) FlushKeptProfile(run->mux, [this](const std::string& m) { Log(m); });
  if (run->mux) run->mux->Stop();
  run->qmp.reset();
  pid_t pid;
  {
    std::lock_guard<std::mutex> l(mu_);
    pid = run->exited ? -1 : run->qemu_pid;
  }
  if (pid > 0) {
    kill(pid, SIGKILL);
    std::unique_lock<std::mutex> l(mu_);
    // The reaper thread collects it (bounded: a SIGKILLed QEMU goes at once).
    cv_.wait_for(l, std::chrono::seconds(20), [&] { return run->exited; });
  }
  if (!run->dir.empty()) {
    std::error_code ec;
    fs::remove_all(run->dir, ec);
    if (ec) Log("could not delete " + run->dir + ": " + ec.message());
    else Log("deleted " + run->dir);
  }
  if (run->owner_fd >= 0) close(run->owner_fd);
  run->owner_fd = -1;
}

Status BrowserVm::Stop() {
  std::shared_ptr<Running> run;
  {
    std::lock_guard<std::mutex> l(mu_);
    run = std::move(run_);
    run_.reset();
  }
  if (run) Teardown(run);
  return OkStatus();
}

void BrowserVm::Shutdown() {
  {
    std::lock_guard<std::mutex> l(mu_);
    quit_ = true;
  }
  cv_.notify_all();
  std::thread autostart;
  {
    std::lock_guard<std::mutex> l(mu_);
    autostart = std::move(autostart_thread_);
  }
  if (autostart.joinable()) autostart.join();  // its Start sees quit_ and returns
  (void)Stop();
  DrainPending();
  if (owner_.joinable()) owner_.join();
}

json BrowserVm::StatusJsonLocked(const std::shared_ptr<Running>& run) {
  if (!run) {
    return {{"state", starting_ ? "starting" : "stopped"},
            {"cdp_connections", cdp_connections_},
            {"autostarts", autostarts_}};
  }
  return {{"state", "running"},
          {"qemu_pid", run->qemu_pid},
          {"dir", run->dir},
          {"image", run->options.image_path},
          {"memory_mib", run->options.memory_mib},
          {"cpus", run->options.cpus},
          {"keep_profile", run->options.keep_profile},
          {"profile", run->options.keep_profile ? "kept" : "tmpfs"},
          {"started", static_cast<int64_t>(run->started)},
          {"cdp_connections", cdp_connections_},
          {"autostarts", autostarts_}};
}

json BrowserVm::StatusJson() {
  std::lock_guard<std::mutex> l(mu_);
  return StatusJsonLocked(run_);
}

namespace {

void SpliceCdp(const std::shared_ptr<channel::Mux>& mux, int fd,
               const std::function<void(const std::string&)>& log) {
  // SECURITY: the host makes this splice; the browser VM's agent connects to its own
  // 127.0.0.1:9222 (Chromium's DevTools). No other path joins the two VMs.
  mux->OpenAsync(protocol::kTcpService, {std::to_string(protocol::kBrowserCdpPort)}, fd,
                 [log](Status st) {
                   if (!st.ok()) log("CDP stream: " + st.error().message());
                 });
}

}  // namespace

void BrowserVm::ConnectCdp(int fd) {
  std::shared_ptr<channel::Mux> mux;
  std::thread finished;  // a previous automatic start's thread, done: joined outside the lock
  std::string refused;
  bool idle = false;  // no VM and no start: only then is the opt-in asked (outside the lock)
  {
    std::lock_guard<std::mutex> l(mu_);
    idle = !(run_ && run_->ready && !run_->exited) && !starting_ && !gate_.in_flight();
  }
  const bool enabled = idle && opts_.autostart && opts_.autostart_enabled && opts_.autostart_enabled();
  {
    std::lock_guard<std::mutex> l(mu_);
    if (run_ && run_->ready && !run_->exited) {
      mux = run_->mux;
      ++cdp_connections_;
    } else if (quit_) {
      refused = "the supervisor is stopping";
    } else if (starting_ || gate_.in_flight()) {
      // A start is in progress (explicit or automatic): the stream waits for it, bounded.
      if (pending_cdp_.size() < kMaxPendingCdp) {
        pending_cdp_.push_back(fd);
        return;
      }
      refused = "too many CDP connections wait for the browser VM's start";
    } else if (!enabled) {
      refused = "no browser VM runs (`cloister browser " + opts_.workspace +
                " start`, or opt in to its automatic start: `cloister config " + opts_.workspace +
                " --browser-autostart on`)";
    } else {
      switch (gate_.OnConnection(AutostartGate::Clock::now())) {
        case AutostartGate::Decision::kWait:  // not reached: in_flight() was checked above
        case AutostartGate::Decision::kStart:
          pending_cdp_.push_back(fd);
          ++autostarts_;
          refusal_logged_ = false;
          finished = std::move(autostart_thread_);
          autostart_thread_ = std::thread([this] { Autostart(); });
          break;
        case AutostartGate::Decision::kRefuse: {
          auto left = std::chrono::duration_cast<std::chrono::seconds>(
              gate_.retry_at() - AutostartGate::Clock::now());
          refused = refusal_logged_ ? ""
                                    : "the last automatic start of the browser VM failed; the next "
                                      "is tried in " + std::to_string(left.count() + 1) +
                                          " s (or `cloister browser " + opts_.workspace + " start`)";
          refusal_logged_ = true;
          close(fd);
          fd = -1;
          break;
        }
      }
    }
  }
  if (finished.joinable()) finished.join();
  if (mux) return SpliceCdp(mux, fd, [this](const std::string& m) { Log(m); });
  if (fd < 0 || !refused.empty()) {
    // The guest's client sees the connection closed.
    if (!refused.empty()) Log("a CDP connection from the workspace was refused: " + refused);
    if (fd >= 0) close(fd);
  }
}

void BrowserVm::Autostart() {
  Log("automatic start at a CDP connection from the workspace");
  bool ok = false;
  auto plan = opts_.autostart();
  if (!plan.ok()) {
    Log("automatic start refused: " + plan.error().message() +
        (plan.error().hint().empty() ? "" : " (" + plan.error().hint() + ")"));
  } else {
    auto started = Start(plan->options, plan->egress);
    // Another start got there first: not a failure of this one (that start drains the streams).
    ok = started.ok() || started.error().code() == ErrorCode::kAlreadyExists;
    if (!started.ok() && ok) Log("automatic start: " + started.error().message());
    if (!started.ok() && !ok) Log("automatic start failed: " + started.error().ToString());
  }
  {
    std::lock_guard<std::mutex> l(mu_);
    gate_.Finish(ok, AutostartGate::Clock::now());
    if (!ok) {
      Log("next automatic start not before " +
          std::to_string(std::chrono::duration_cast<std::chrono::seconds>(
                             gate_.retry_at() - AutostartGate::Clock::now())
                             .count()) +
          " s");
    }
  }
  DrainPending();
}

void BrowserVm::DrainPending() {
  std::vector<int> fds;
  std::shared_ptr<channel::Mux> mux;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (starting_ || (gate_.in_flight() && !quit_)) return;  // a start still runs: it drains
    fds.swap(pending_cdp_);
    if (run_ && run_->ready && !run_->exited) {
      mux = run_->mux;
      cdp_connections_ += fds.size();
    }
  }
  for (int fd : fds) {
    if (mux) {
      SpliceCdp(mux, fd, [this](const std::string& m) { Log(m); });
    } else {
      close(fd);
    }
  }
}

}  // namespace cloister::vm
