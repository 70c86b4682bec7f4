#include "supervisor/boot_plan.h"

#include <fcntl.h>

#include "base/agent_tools.h"
#include "devcontainer/workspace.h"
#include "store/layout.h"
#include "supervisor/ports.h"

namespace cloister::vm {

Result<BootPlan> PlanBoot(const BootInputs& in) {
  const WorkspaceConfig& config = in.config;
  BootPlan plan;
  MetaConfig& meta = plan.meta;
  meta.workspace = in.workspace;
  meta.boot_id = in.boot_id;
  // A devcontainer's environment and lifecycle commands (devcontainer/workspace.h), checked again
  // as they are read: a credential-shaped value refuses the boot. Everything cloister sets below
  // goes over its environment.
  ASSIGN_OR_RETURN(auto dc, devcontainer::WorkspaceDevcontainerFromConfig(config));
  for (const auto& [k, v] : dc.env) meta.env[k] = v;
  if (!dc.steps.empty()) meta.devcontainer = devcontainer::GuestLifecycleJson(dc);
  // SECURITY: placeholders, proxy settings and the CA certificate only (supervisor/egress.h).
  for (const auto& [k, v] : in.guest.env) meta.env[k] = v;
  for (const GuestFileSpec& f : in.guest.files) {
    meta.files.push_back({f.path, f.content, f.mode, f.owner});
  }
  meta.ca_certificate = in.guest.ca_pem;
  // The coding agent (base/agent_tools.h): the guest installs it at its first boot and runs it in
  // the first tmux window, in the first shared folder (or the home).
  if (!FindAgentTool(config.tool)) {
    return Error(ErrorCode::kInvalidArgument,
                 "workspace " + in.workspace + ": unknown tool '" + config.tool + "'",
                 "`cloister config " + in.workspace + " --tool shell` (or " + AgentToolNames() +
                     ")");
  }
  meta.tool = config.tool;
  // Published ports: the guest watches its listeners only when the workspace opted in.
  ASSIGN_OR_RETURN(PortsConfig ports, PortsConfigFromConfig(config));
  meta.auto_ports = ports.auto_ports;
  // The guest's listeners: the agent's defaults plus the browser's DevTools endpoint
  // (supervisor/browser_vm.h): each connection to 127.0.0.1:9222 becomes a `cdp` stream, which
  // the host splices to the workspace's browser VM (refused while none runs).
  meta.forwards = {{protocol::kGuestProxyListen, protocol::kProxyService},
                   {protocol::kGuestAgentListen, protocol::kSshAgentService},
                   {"tcp:127.0.0.1:" + std::to_string(protocol::kBrowserCdpPort),
                    protocol::kCdpService}};
  if (!config.volumes.empty()) meta.workdir = config.volumes.front().guest;
  for (const auto& [k, v] : ToolEnvironment(config.tool)) meta.env[k] = v;
  ASSIGN_OR_RETURN(auto registry, GuestNpmRegistry(in.npm_registry));
  for (const auto& [k, v] : registry) meta.env[k] = v;

  VmSpec& spec = plan.spec;
  int i = 0;
  for (const Volume& v : config.volumes) {
    std::string tag = "share" + std::to_string(i++);
    meta.shares.push_back({tag, v.guest, v.read_only});
    spec.shares.push_back({v.host, tag, v.read_only});
  }
  plan.meta_disk = in.paths.meta_disk;
  plan.build_meta_disk = !in.resume || !in.meta_disk_present;

  spec.name = in.workspace;
  spec.accel = in.accel;
  if (!in.tcg_cpu.empty()) spec.tcg_cpu = in.tcg_cpu;
  if (!in.tcg_tb_size.empty()) {
    if (in.tcg_tb_size.size() > 4 ||
        in.tcg_tb_size.find_first_not_of("0123456789") != std::string::npos) {
      return Error(ErrorCode::kInvalidArgument,
                   "CLOISTER_TCG_TB_SIZE='" + in.tcg_tb_size + "' is not a size in MiB",
                   "unset it, or e.g. CLOISTER_TCG_TB_SIZE=256 (0 = QEMU's default)");
    }
    spec.tcg_tb_size_mib = std::stoi(in.tcg_tb_size);
  }
  if (!in.disk_aio.empty()) spec.disk_aio = in.disk_aio;  // BuildQemuArgv checks it
  if (in.disk_cache == "none") {
    spec.disk_cache_direct = true;
  } else if (!in.disk_cache.empty() && in.disk_cache != "writeback") {
    return Error(ErrorCode::kInvalidArgument, "CLOISTER_DISK_CACHE='" + in.disk_cache + "'",
                 "writeback (the default) or none");
  }
  if (in.disk_iothread == "1") {
    spec.disk_iothread = true;
  } else if (!in.disk_iothread.empty() && in.disk_iothread != "0") {
    return Error(ErrorCode::kInvalidArgument, "CLOISTER_DISK_IOTHREAD='" + in.disk_iothread + "'",
                 "0 (the default) or 1");
  }
  if (in.free_page_reporting == "0") {
    spec.free_page_reporting = false;
  } else if (!in.free_page_reporting.empty() && in.free_page_reporting != "1") {
    return Error(ErrorCode::kInvalidArgument,
                 "CLOISTER_FREE_PAGE_REPORTING='" + in.free_page_reporting + "' is not 0 or 1",
                 "unset it (the balloon with free page reporting is the default)");
  }
  spec.cpus = static_cast<int>(config.cpus);
  spec.memory_mib = static_cast<int>(config.memory_mib);
  spec.mac = config.mac;
  spec.channel_socket = in.paths.channel_socket;
  spec.qmp_socket = in.paths.qmp_socket;
  spec.incoming_defer = in.resume;
  spec.sandbox = in.sandbox;

  // SECURITY: QEMU opens no file by path (vm/qemu_access.h): every file it needs is an fd.
  plan.backing_dirs = {in.paths.workspace_dir};
  plan.backing_files = {config.image.path};
  using Slot = BootFd::Slot;
  using How = BootFd::How;
  plan.fds.push_back({Slot::kSystemDisk, How::kFdSet, in.disks.system.path, O_RDWR,
                      layout::DiskFormatName(in.disks.system.format)});
  plan.fds.push_back({Slot::kHomeDisk, How::kFdSet, in.disks.home.path, O_RDWR,
                      layout::DiskFormatName(in.disks.home.format)});
  plan.fds.push_back({Slot::kMetaDisk, How::kFdSet, in.paths.meta_disk, O_RDONLY});
  plan.fds.push_back({Slot::kKernel, How::kProcPath, in.kernel.kernel, O_RDONLY, "", true});
  plan.fds.push_back({Slot::kInitrd, How::kProcPath, in.kernel.initrd, O_RDONLY, "", true});
  for (size_t s = 0; s < spec.shares.size(); ++s) {
    // 9p serves the folder relative to this directory fd; QEMU acts there as the folder's owner
    // (vm/qemu_jail.h), and the share guard makes every name it creates (vm/share_guard.h).
    plan.fds.push_back({Slot::kShare, How::kProcPath, spec.shares[s].host_path,
                        O_RDONLY | O_DIRECTORY, "", false, s});
  }
  plan.fds.push_back({Slot::kConsoleLog, How::kFdSet, in.paths.console_log, O_WRONLY | O_APPEND});
  plan.truncate_console_log = !in.resume;
  return plan;
}

}  // namespace cloister::vm
