#include "supervisor/qemu_launch.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>

#include "supervisor/control.h"
#include "supervisor/environment.h"
#include "vm/process.h"
#include "vm/qemu_access.h"
#include "vm/qemu_jail.h"

namespace cloister::vm {

Result<pid_t> LaunchQemu(const BootPlan& plan, const QemuLaunchOptions& options) {
  ASSIGN_OR_RETURN(std::string agent, FindAgentBinary());
  MetaExecutables exes;
  if (auto audit = FindHelperBinary("cloister-audit", "CLOISTER_AUDIT_BIN", "audit"); audit.ok()) {
    exes["cloister-audit"] = *audit;
  }
  if (plan.build_meta_disk) {
    RETURN_IF_ERROR(BuildMetaDisk(plan.meta_disk, agent, plan.meta, {}, exes));
  }
  if (options.phase) options.phase("metadata-disk");

  VmSpec spec = plan.spec;
  const bool resume = spec.incoming_defer;
  // SECURITY: QEMU opens no file by path (vm/qemu_access.h): every file and socket it needs is an
  // fd we pass, and as root it runs under the workspace's own unprivileged uid.
  ASSIGN_OR_RETURN(QemuIdentity ident, QemuIdentityForId(options.qemu_id, spec.accel == Accel::kKvm));
  QemuFds fds;
  // SECURITY: QEMU runs in its own mount namespace and Landlock ruleset (vm/qemu_jail.h).
  JailSpec jail{.kvm = spec.accel == Accel::kKvm, .identity = ident};
  auto pass_disk = [&](const BootFd& d) -> Result<DiskSpec> {
    ASSIGN_OR_RETURN(std::vector<DiskSpec> chain,
                     ReadBackingChain(d.path, d.format, plan.backing_dirs, plan.backing_files));
    for (DiskSpec& layer : chain) {
      ASSIGN_OR_RETURN(layer.path, fds.AddToFdSet(layer.path, O_RDONLY));
    }
    ASSIGN_OR_RETURN(std::string top, fds.AddToFdSet(d.path, d.flags));
    return DiskSpec{top, d.format, std::move(chain)};
  };
  for (const BootFd& f : plan.fds) {
    using Slot = BootFd::Slot;
    if (f.slot == Slot::kSystemDisk || f.slot == Slot::kHomeDisk) {
      ASSIGN_OR_RETURN(DiskSpec disk, pass_disk(f));
      (f.slot == Slot::kSystemDisk ? spec.system_disk : spec.home_disk) = std::move(disk);
      continue;
    }
    if (f.slot == Slot::kConsoleLog) {
      int fd = open(f.path.c_str(),
                    O_WRONLY | O_CREAT | O_CLOEXEC | (plan.truncate_console_log ? O_TRUNC : 0), 0640);
      if (fd < 0) return ErrnoError("create " + f.path, errno);
      close(fd);
    }
    std::string name;
    if (f.how == BootFd::How::kFdSet) {
      ASSIGN_OR_RETURN(name, fds.AddToFdSet(f.path, f.flags));
    } else {
      ASSIGN_OR_RETURN(name, fds.AddProcPath(f.path, f.flags, f.copy_if_uid_dropped && ident.drop));
    }
    switch (f.slot) {
      case Slot::kMetaDisk: spec.meta_disk = name; break;
      case Slot::kKernel: spec.kernel = name; jail.read_fds.push_back(fds.fds().back()); break;
      case Slot::kInitrd: spec.initrd = name; jail.read_fds.push_back(fds.fds().back()); break;
      case Slot::kShare:
        if (f.share >= spec.shares.size()) {
          return Error(ErrorCode::kInternal, "boot plan: share " + std::to_string(f.share) +
                                                 " of " + std::to_string(spec.shares.size()));
        }
        spec.shares[f.share].host_path = name;
        // The jail reopens it inside QEMU's namespace (the fd number stays).
        jail.shares.push_back({f.path, fds.fds().back(), spec.shares[f.share].readonly});
        break;
      case Slot::kConsoleLog: spec.console_log = name; break;
      case Slot::kSystemDisk:
      case Slot::kHomeDisk: break;
    }
  }
  ASSIGN_OR_RETURN(int qmp_listen, ListenUnix(spec.qmp_socket));
  spec.qmp_listen_fd = fds.AddListener(qmp_listen);
  ASSIGN_OR_RETURN(int channel_listen, ListenUnix(spec.channel_socket));
  spec.channel_listen_fd = fds.AddListener(channel_listen);
  spec.fd_sets = fds.fd_sets();
  ASSIGN_OR_RETURN(std::vector<std::string> argv, BuildQemuArgv(spec));
  ASSIGN_OR_RETURN(std::unique_ptr<QemuJail> qemu_jail, QemuJail::Prepare(jail));

  if (options.progress) {
    options.progress(std::string(resume ? "resuming" : "starting") + " QEMU (" +
                     AccelName(spec.accel) +
                     (ident.drop ? ", uid " + std::to_string(ident.uid) : std::string()) + ")");
  }
  if (options.log) {
    std::string line;
    for (const auto& a : argv) line += a + " ";
    options.log("qemu: " + line);
  }
  SpawnOptions so;
  so.stdout_path = options.output_path;
  so.die_with_parent = true;
  so.keep_fds = fds.fds();
  // SECURITY: QEMU gets PATH and LANG=C, nothing of the supervisor's environment
  // (supervisor/environment.h).
  so.env = QemuEnvironment();
  so.before_exec = [j = qemu_jail.get()] { return j->Enter(); };
  so.before_exec_error = &QemuJail::StepName;  // Enter() also drops to `ident` (qemu_jail.h)
  ASSIGN_OR_RETURN(pid_t pid, SpawnProcess(argv, so));
  fds.CloseAll();  // QEMU has its copies; ours would keep its sockets listening if it died
  // SECURITY: the share guard makes every entry QEMU creates in a share (vm/share_guard.h).
  if (Status guard = qemu_jail->StartGuard(pid); !guard.ok()) {
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
    return guard.error();
  }
  if (options.phase) options.phase("qemu-spawn");
  return pid;
}

}  // namespace cloister::vm
