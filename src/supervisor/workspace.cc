#include "supervisor/workspace.h"

#include <sys/stat.h>

#include <ctime>
#include <filesystem>

#include "store/layout.h"
#include "supervisor/supervisor.h"
#include "vm/pvh_kernel.h"

namespace cloister::vm {

namespace fs = std::filesystem;

RunPaths RunPathsFor(const Store& store, const std::string& name) {
  WorkspacePaths p = store.Paths(name);
  RunPaths r;
  r.name = name;
  r.workspace_dir = p.dir;
  r.run_dir = p.run_dir;
  r.supervisor_pid = p.supervisor_pid;
  r.supervisor_socket = p.supervisor_socket;
  r.supervisor_log = p.supervisor_log;
  r.qmp_socket = p.qmp_socket;
  r.channel_socket = p.channel_socket;
  r.meta_disk = p.meta_disk;
  r.console_log = p.console_log;
  r.suspend_state = p.suspend_state;
  return r;
}

Result<KernelFiles> KernelFilesFor(const WorkspaceConfig& config) {
  if (config.image.path.empty()) {
    return Error(ErrorCode::kFailedPrecondition, "workspace " + config.name + " names no base image");
  }
  fs::path dir = fs::path(config.image.path).parent_path();
  KernelFiles k{(dir / "vmlinuz").string(), (dir / "initrd.img").string()};
  struct stat st;
  for (const std::string& f : {k.kernel, k.initrd}) {
    if (stat(f.c_str(), &st) != 0) {
      return Error(ErrorCode::kNotFound, "the image's kernel files are missing: " + f,
                   "rebuild the image (`cloister image build`)");
    }
  }
  return k;
}

const char* KernelBootName(KernelBoot boot) { return boot == KernelBoot::kPvh ? "pvh" : "bzimage"; }

std::optional<KernelBoot> ParseKernelBoot(std::string_view text) {
  if (text == "pvh") return KernelBoot::kPvh;
  if (text == "bzimage") return KernelBoot::kBzImage;
  return std::nullopt;
}

KernelFiles ChooseBootKernel(const KernelFiles& k, const std::string& store_root, KernelBoot want,
                             KernelBoot* used, std::string* note) {
  *used = KernelBoot::kBzImage;
  note->clear();
  if (want != KernelBoot::kPvh) return k;
  auto pvh = EnsurePvhKernel(k.kernel, store_root + "/" + std::string(layout::kPvhCacheDir));
  if (!pvh.ok()) {
    *note = "booting the bzImage: no PVH kernel (" + pvh.error().message() + ")";
    return k;
  }
  *used = KernelBoot::kPvh;
  return KernelFiles{*pvh, k.initrd};
}

bool IsEphemeral(const WorkspaceConfig& config) {
  auto it = config.extra.find(kEphemeralKey);
  return it != config.extra.end() && it->is_boolean() && it->get<bool>();
}

std::vector<std::string> CollectDeadEphemeral(Store& store) {
  std::vector<std::string> removed;
  auto list = store.List();
  if (!list.ok()) return removed;
  for (const WorkspaceSummary& ws : *list) {
    if (!ws.config || !IsEphemeral(*ws.config)) continue;
    RunPaths paths = RunPathsFor(store, ws.name);
    VmStatus st = DeriveStatus(paths, std::chrono::seconds(2));
    if (st.state == VmState::kBroken) {
      if (LivePid(paths.supervisor_pid) != 0) continue;  // hung, not dead: leave it to stop --force
    } else if (st.state == VmState::kStopped || st.state == VmState::kSuspended) {
      // A `run --rm` between create and start has no supervisor yet: a workspace that never
      // booted (no console log) is left alone for a while.
      struct stat sb;
      bool booted = stat(paths.console_log.c_str(), &sb) == 0;
      if (!booted && std::time(nullptr) - ws.config->created < 120) continue;
    } else {
      continue;
    }
    // A `run --rm` still setting it up holds the workspace lock; Remove then fails busy: skip.
    if (store.Remove(ws.name).ok()) removed.push_back(ws.name);
  }
  return removed;
}

}  // namespace cloister::vm
