#include "supervisor/builder_vm.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <random>
#include <sstream>
#include <thread>

#include "base/subprocess.h"
#include "channel/exec_client.h"
#include "channel/mux.h"
#include "protocol/contract.h"
#include "store/mac.h"
#include "supervisor/boot_plan.h"
#include "supervisor/browser_vm.h"
#include "supervisor/control.h"
#include "supervisor/egress.h"
#include "supervisor/qemu_launch.h"
#include "supervisor/state.h"
#include "supervisor/workspace.h"
#include "transfer/tar.h"
#include "vm/qmp.h"

namespace cloister::vm {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace builder_vm_impl {

constexpr char kOwnerFile[] = "owner.pid";
constexpr char kDiskFile[] = "system.qcow2";
constexpr char kMetaFile[] = "meta.img";
constexpr char kConsoleFile[] = "console.log";
constexpr char kQmpSocket[] = "q.sock";
constexpr char kChannelSocket[] = "c.sock";

std::string Tail(const std::string& path, size_t max) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  std::string s = ss.str();
  if (s.size() > max) s = s.substr(s.size() - max);
  for (char& c : s) {
    if ((c < 0x20 && c != '\n') || c == 0x7f) c = '?';  // SECURITY: guest text for a log
  }
  return s;
}

std::string RandomMac() {
  std::random_device rd;
  char buf[18];
  std::snprintf(buf, sizeof buf, "52:54:00:%02x:%02x:%02x", rd() & 0xff, rd() & 0xff, rd() & 0xff);
  return buf;
}

// What the reaper thread shares with the build (never the Running itself: its destructor is what
// kills QEMU, so the reaper must not keep it alive).
struct Shared {
  std::mutex mu;
  std::condition_variable cv;
  bool ready = false;
  bool exited = false;
};

// One running builder VM; the destructor kills QEMU, waits for its reaper and deletes the dir.
struct Running {
  std::string dir;
  int owner_fd = -1;
  pid_t pid = -1;
  std::shared_ptr<Shared> shared = std::make_shared<Shared>();
  std::unique_ptr<QmpClient> qmp;
  std::shared_ptr<channel::Mux> mux;
  std::unique_ptr<Egress> egress;
  BuilderCancel* cancel = nullptr;  // its kill is cleared first

  ~Running() {
    if (cancel) cancel->SetKill(nullptr);
    if (mux) mux->Stop();
    qmp.reset();
    if (pid > 0) {
      std::unique_lock<std::mutex> l(shared->mu);
      if (!shared->exited) kill(pid, SIGKILL);
      shared->cv.wait_for(l, std::chrono::seconds(30), [&] { return shared->exited; });
    }
    if (egress) egress->Stop();
    if (!dir.empty()) {
      std::error_code ec;
      fs::remove_all(dir, ec);
    }
    if (owner_fd >= 0) close(owner_fd);
  }
};

Result<std::string> MakeBuilderDir(const std::string& store_root) {
  std::string tmp = StoreTmpDir(store_root);
  if (mkdir(tmp.c_str(), 0700) != 0 && errno != EEXIST) return ErrnoError("create " + tmp, errno);
  std::string templ = tmp + "/" + kBuilderDirPrefix + "XXXXXX";
  std::vector<char> buf(templ.begin(), templ.end());
  buf.push_back('\0');
  if (mkdtemp(buf.data()) == nullptr) return ErrnoError("create " + templ, errno);
  return std::string(buf.data());
}

BootPlan PlanBuilderBoot(const BuilderVmOptions& o, const std::string& dir,
                         const KernelFiles& kernel, const GuestSetup& guest) {
  BootPlan plan;
  MetaConfig& meta = plan.meta;
  meta.workspace = "image-builder";
  meta.boot_id = NewBootId();
  // SECURITY: the proxy's settings and CA only: this proxy holds no credential.
  std::map<std::string, std::string> proxy_env = ProxyEnvironment();
  for (const auto& [k, v] : guest.env) {
    if (proxy_env.count(k)) meta.env[k] = v;
  }
  meta.ca_certificate = guest.ca_pem;
  meta.tool = "shell";
  meta.forwards = {{protocol::kGuestProxyListen, protocol::kProxyService}};
  meta.no_home = true;  // vdb is the output disk
  plan.meta_disk = dir + "/" + kMetaFile;
  plan.build_meta_disk = true;
  VmSpec& spec = plan.spec;
  spec.name = "image-builder";
  spec.accel = o.accel;
  spec.cpus = o.cpus;
  spec.memory_mib = o.memory_mib;
  spec.mac = RandomMac();
  spec.channel_socket = dir + "/" + kChannelSocket;
  spec.qmp_socket = dir + "/" + kQmpSocket;
  spec.sandbox = o.sandbox;
  if (const char* cpu = std::getenv("CLOISTER_TCG_CPU"); cpu && *cpu) spec.tcg_cpu = cpu;
  plan.backing_dirs = {dir};
  plan.backing_files = {o.image_disk};
  using Slot = BootFd::Slot;
  using How = BootFd::How;
  plan.fds.push_back({Slot::kSystemDisk, How::kFdSet, dir + "/" + kDiskFile, O_RDWR, "qcow2"});
  plan.fds.push_back({Slot::kHomeDisk, How::kFdSet, o.output_disk, O_RDWR, "raw"});
  plan.fds.push_back({Slot::kMetaDisk, How::kFdSet, plan.meta_disk, O_RDONLY});
  plan.fds.push_back({Slot::kKernel, How::kProcPath, kernel.kernel, O_RDONLY, "", true});
  plan.fds.push_back({Slot::kInitrd, How::kProcPath, kernel.initrd, O_RDONLY, "", true});
  plan.fds.push_back({Slot::kConsoleLog, How::kFdSet, dir + "/" + kConsoleFile, O_WRONLY | O_APPEND});
  plan.truncate_console_log = true;
  return plan;
}

// QEMU, its reaper, QMP and the channel with the builder's two services; then READY.
// TODO(machine): supervisor/machine.h's Machine owns this sequence once it is on main.
Status Boot(const BuilderVmOptions& o, const std::shared_ptr<Running>& run, const BootPlan& plan) {
  QemuLaunchOptions launch;
  launch.output_path = o.output_path.empty() ? run->dir + "/qemu.log" : o.output_path;
  launch.qemu_id = kBuilderQemuId;
  ASSIGN_OR_RETURN(pid_t pid, LaunchQemu(plan, launch));
  run->pid = pid;
  std::shared_ptr<Shared> shared = run->shared;
  if (o.cancel) {
    o.cancel->SetKill([shared, pid] {
      std::lock_guard<std::mutex> l(shared->mu);
      if (!shared->exited) kill(pid, SIGKILL);
    });
    run->cancel = o.cancel;
    if (o.cancel->cancelled()) kill(pid, SIGKILL);  // cancelled while it was being spawned
  }
  std::thread([shared, pid] {
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    std::lock_guard<std::mutex> l(shared->mu);
    shared->exited = true;
    shared->cv.notify_all();
  }).detach();
  ASSIGN_OR_RETURN(run->qmp, QmpClient::Connect(plan.spec.qmp_socket, std::chrono::seconds(30)));
  ASSIGN_OR_RETURN(int chan, ConnectUnix(plan.spec.channel_socket));
  channel::MuxOptions mo;
  mo.role = channel::MuxRole::kHost;
  mo.on_ready = [shared](const std::string&) {
    std::lock_guard<std::mutex> l(shared->mu);
    shared->ready = true;
    shared->cv.notify_all();
  };
  ASSIGN_OR_RETURN(auto mux, channel::Mux::Create(chan, mo));
  Egress* egress = run->egress.get();
  // SECURITY: nothing else: exec, ssh-agent, cdp and every other name the guest opens fail.
  RegisterBrowserServices(
      *mux, [egress](int fd, const std::vector<std::string>&) { egress->Serve(fd, kBuilderTraceSource); },
      [egress](int fd, const std::vector<std::string>&) {
        egress->ServeTransparent(fd, kBuilderTraceSource);
      });
  run->mux = std::shared_ptr<channel::Mux>(std::move(mux));
  RETURN_IF_ERROR(run->mux->Start());
  std::unique_lock<std::mutex> l(shared->mu);
  shared->cv.wait_until(l, Clock::now() + o.ready_timeout,
                        [&] { return shared->ready || shared->exited; });
  if (!shared->ready) {
    return Error(ErrorCode::kUnavailable,
                 std::string("the builder VM did not start: ") +
                     (shared->exited ? "its QEMU exited during boot"
                                  : "its agent did not report ready in time"),
                 "its console ends: " + Tail(run->dir + "/" + kConsoleFile, 1500));
  }
  return OkStatus();
}

// Runs `argv` as root in the VM with `in_fd` as stdin (-1: none), its output to `out_fd`.
Result<int> RunAsRoot(Running& run, const std::vector<std::string>& argv, int in_fd, int out_fd) {
  ASSIGN_OR_RETURN(int stream, run.mux->Open(protocol::kExecService, {}, std::chrono::seconds(30)));
  channel::ExecRequest req;
  req.argv = argv;
  req.user = "root";
  req.cwd = "/";
  channel::ExecIo io;
  io.in = in_fd;
  io.out = out_fd;
  io.err = out_fd;
  auto exit = channel::RunExec(stream, req, io);
  close(stream);
  if (!exit.ok()) return exit.error();
  return exit->ShellCode();
}

// Pushes one input: WriteTar on one end of a socket pair, the VM's tar reading the other.
Status Push(Running& run, const std::string& dir, const BuilderInput& in, int out_fd) {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) return ErrnoError("socketpair", errno);
  Status wrote = OkStatus();
  std::thread writer([&] {
    auto w = transfer::WriteTar(sv[1], in.host_path, in.name);
    if (!w.ok()) wrote = w.error();
    shutdown(sv[1], SHUT_WR);
  });
  auto rc = RunAsRoot(run, {"tar", "-x", "-o", "-C", dir, "-f", "-"}, sv[0], out_fd);
  shutdown(sv[0], SHUT_RDWR);
  writer.join();
  close(sv[0]);
  close(sv[1]);
  RETURN_IF_ERROR(wrote);
  if (!rc.ok()) return rc.error().WithContext("copying " + in.host_path + " into the builder VM");
  if (*rc != 0) {
    return Error(ErrorCode::kIo, "copying " + in.host_path + " into the builder VM failed (tar "
                                 "exited " + std::to_string(*rc) + ")");
  }
  return OkStatus();
}

// The command's output: a pipe read on this thread and handed to on_output.
Result<int> RunCommand(Running& run, const BuilderVmOptions& o) {
  int p[2];
  if (pipe2(p, O_CLOEXEC) != 0) return ErrnoError("pipe", errno);
  Result<int> rc = Error(ErrorCode::kInternal, "not run");
  std::thread runner([&] {
    rc = RunAsRoot(run, o.command, -1, p[1]);
    close(p[1]);
  });
  char buf[16384];
  while (true) {
    ssize_t n = read(p[0], buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    if (o.on_output) o.on_output(std::string_view(buf, static_cast<size_t>(n)));
  }
  runner.join();
  close(p[0]);
  return rc;
}

}  // namespace builder_vm_impl

Result<int> RunBuilderVm(const BuilderVmOptions& o) {
  auto say = [&](const std::string& l) {
    if (o.progress) o.progress(l);
  };
  CollectStaleBuilderDirs(o.store_root);
  WorkspaceConfig image_config;
  image_config.name = "image-builder";
  image_config.image.path = o.image_disk;
  ASSIGN_OR_RETURN(KernelFiles kernel, KernelFilesFor(image_config));
  auto run = std::make_shared<builder_vm_impl::Running>();
  ASSIGN_OR_RETURN(run->dir, builder_vm_impl::MakeBuilderDir(o.store_root));
  ASSIGN_OR_RETURN(run->owner_fd, ClaimPidFile(run->dir + "/" + builder_vm_impl::kOwnerFile));
  const std::string disk = run->dir + "/" + builder_vm_impl::kDiskFile;
  // SECURITY: the builder image is the overlay's read-only backing; the VM's writes land in the
  // overlay, deleted with the directory.
  auto created = RunProcessChecked({"qemu-img", "create", "-q", "-f", "qcow2", "-F", "raw", "-b",
                                    o.image_disk, disk, std::to_string(o.system_bytes)});
  if (!created.ok()) return created.error().WithContext("builder disk");

  EgressOptions eo;
  eo.workspace = "image-builder";
  eo.keys_dir = o.store_root + "/keys";
  eo.secrets_file = run->dir + "/secrets.enc";  // never written: no credential
  eo.trace_log = run->dir + "/trace.jsonl";
  RETURN_IF_ERROR(EgressOverridesFromEnv(eo));
  ASSIGN_OR_RETURN(run->egress, Egress::Start(std::move(eo)));

  auto interrupted = [&] {
    return Error(ErrorCode::kCancelled, "the image build was interrupted",
                 "nothing of it was kept; run it again");
  };
  if (o.cancel && o.cancel->cancelled()) return interrupted();
  say("builder: booting its VM (" + std::string(AccelName(o.accel)) + ")");
  auto t0 = Clock::now();
  BootPlan plan = builder_vm_impl::PlanBuilderBoot(o, run->dir, kernel, run->egress->guest());
  Status booted = builder_vm_impl::Boot(o, run, plan);
  if (o.cancel && o.cancel->cancelled()) return interrupted();
  RETURN_IF_ERROR(booted);
  char secs[32];
  std::snprintf(secs, sizeof secs, "%.1f s",
                std::chrono::duration<double>(Clock::now() - t0).count());
  say(std::string("builder: ready in ") + secs);

  int null_fd = open("/dev/null", O_WRONLY | O_CLOEXEC);
  Status pushed = OkStatus();
  for (const BuilderInput& in : o.inputs) {
    auto made = builder_vm_impl::RunAsRoot(*run, {"mkdir", "-p", in.dir}, -1, null_fd);
    if (!made.ok()) pushed = made.error();
    if (pushed.ok()) pushed = builder_vm_impl::Push(*run, in.dir, in, null_fd);
    if (!pushed.ok()) break;
  }
  close(null_fd);
  if (o.cancel && o.cancel->cancelled()) return interrupted();
  RETURN_IF_ERROR(pushed);
  auto rc = builder_vm_impl::RunCommand(*run, o);
  if (o.cancel && o.cancel->cancelled()) return interrupted();
  return rc;
}

void BuilderCancel::Cancel() {
  std::function<void()> k;
  {
    std::lock_guard<std::mutex> l(mu_);
    cancelled_ = true;
    k = kill_;
  }
  if (k) k();
}

bool BuilderCancel::cancelled() const {
  std::lock_guard<std::mutex> l(mu_);
  return cancelled_;
}

void BuilderCancel::SetKill(std::function<void()> kill) {
  std::lock_guard<std::mutex> l(mu_);
  kill_ = std::move(kill);
}

std::vector<std::string> CollectStaleBuilderDirs(const std::string& store_root) {
  std::vector<std::string> removed;
  std::string tmp = StoreTmpDir(store_root);
  DIR* d = opendir(tmp.c_str());
  if (!d) return removed;
  std::vector<std::string> names;
  while (dirent* e = readdir(d)) {
    std::string n = e->d_name;
    if (n.rfind(kBuilderDirPrefix, 0) == 0) names.push_back(n);
  }
  closedir(d);
  for (const std::string& n : names) {
    std::string dir = tmp + "/" + n;
    struct stat st;
    if (lstat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) continue;
    std::string owner = dir + "/" + builder_vm_impl::kOwnerFile;
    struct stat ost;
    if (lstat(owner.c_str(), &ost) != 0) {
      if (std::time(nullptr) - st.st_mtime < 60) continue;  // being made
    } else if (LivePid(owner) != 0) {
      continue;  // its build runs
    }
    std::error_code ec;
    fs::remove_all(dir, ec);
    if (!ec) removed.push_back(dir);
  }
  return removed;
}

}  // namespace cloister::vm
