// Checkpoints: list, create (prepare/commit/abort, also live from the supervisor), restore,
// remove and retention (store/store.h).
#include "store/store.h"

#include <signal.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <map>
#include <set>

#include "base/strings.h"
#include "store/image_ref.h"
#include "store/mac.h"
#include "store/retention.h"
#include "store/store_internal.h"

namespace cloister {

using store_internal::StemOf;
using store_internal::EraseLayer;
using store_internal::MutableLayer;

// ---------------------------------------------------------------------------------------------
// Checkpoints

Result<std::vector<CheckpointInfo>> Store::ListCheckpoints(const std::string& name) {
  ASSIGN_OR_RETURN(WorkspaceInfo info, Describe(name));
  return info.checkpoints;
}

Result<PreparedCheckpoint> Store::PrepareCheckpoint(const WorkspaceLock& lock,
                                                    CheckpointOptions options) {
  const std::string& name = lock.name();
  ASSIGN_OR_RETURN(WorkspaceConfig c, LoadConfig(name));
  WorkspacePaths p = Paths(name);
  PreparedCheckpoint prep;
  prep.name = name;
  prep.created = Now();
  prep.automatic = options.automatic;
  std::string base_id = FormatUtcCompact(prep.created);
  ASSIGN_OR_RETURN(FileInfo cdir, env_->Stat(p.checkpoints_dir));
  if (!cdir.exists) RETURN_IF_ERROR(env_->CreateDir(p.checkpoints_dir, 0755));
  for (int n = 0;; ++n) {
    std::string id = n == 0 ? base_id : base_id + "-" + std::to_string(n);
    if (c.FindCheckpoint(id)) continue;
    // A directory of that name not recorded in the config is a leftover: clean it first.
    std::string dir = JoinPath(p.checkpoints_dir, id);
    bool used = false;
    for (const DiskLayer& l : c.layers) {
      used |= StartsWith(l.file, std::string(layout::kCheckpointsDir) + "/" + id + "/");
    }
    if (used) continue;
    RETURN_IF_ERROR(env_->RemoveAll(dir));
    RETURN_IF_ERROR(env_->CreateDir(dir, 0755));
    prep.id = id;
    break;
  }
  uint64_t gen = c.next_generation;
  for (DiskKind kind : {DiskKind::kSystem, DiskKind::kHome}) {
    const std::string& top = kind == DiskKind::kSystem ? c.system_top : c.home_top;
    if (top.empty()) continue;
    const DiskLayer* l = c.FindLayer(top);
    PreparedCheckpoint::Disk d;
    d.disk = kind;
    d.old_top = top;
    d.layer_format = l->format;
    d.layer = layout::CheckpointLayerPath(prep.id, StemOf(kind), l->format);
    d.layer_path = JoinPath(p.dir, d.layer);
    d.new_top = layout::LiveDiskFileName(StemOf(kind), gen++, layout::DiskFormat::kQcow2);
    d.new_top_path = JoinPath(p.dir, d.new_top);
    RETURN_IF_ERROR(env_->Link(JoinPath(p.dir, top), d.layer_path));
    RETURN_IF_ERROR(env_->RemoveFile(d.new_top_path));
    uint64_t vsize = kind == DiskKind::kSystem ? c.image.size : c.home_size;
    RETURN_IF_ERROR(CreateOverlay(env_, d.new_top_path, d.layer_path, l->format, vsize));
    prep.disks.push_back(d);
  }
  prep.next_generation = gen;
  return prep;
}

Result<CheckpointRecord> Store::CommitCheckpointLocked(const std::string& name,
                                                       const PreparedCheckpoint& prep,
                                                       bool may_rewrite_live_tops) {
  CheckpointRecord rec;
  rec.id = prep.id;
  rec.created = prep.created;
  rec.automatic = prep.automatic;
  std::vector<std::string> old_names;
  RETURN_IF_ERROR(CommitDisks(name, [&](WorkspaceConfig& c) -> Status {
    if (c.FindCheckpoint(prep.id)) {
      return Error(ErrorCode::kAlreadyExists, "checkpoint " + prep.id + " already exists");
    }
    bool has_system = false;
    for (const PreparedCheckpoint::Disk& d : prep.disks) {
      std::string& top = d.disk == DiskKind::kSystem ? c.system_top : c.home_top;
      if (top != d.old_top) {
        return Error(ErrorCode::kFailedPrecondition,
                     "the live disks changed since the checkpoint was prepared");
      }
      DiskLayer* l = MutableLayer(c, d.old_top);
      if (!l) return Error(ErrorCode::kCorrupt, "live layer " + d.old_top + " is not recorded");
      l->file = d.layer;  // the frozen layer keeps its backing
      DiskLayer fresh;
      fresh.file = d.new_top;
      fresh.disk = d.disk;
      fresh.format = layout::DiskFormat::kQcow2;
      fresh.backing = d.layer;
      c.layers.push_back(fresh);
      top = d.new_top;
      old_names.push_back(d.old_top);
      if (d.disk == DiskKind::kSystem) rec.system = d.layer;
      else rec.home = d.layer;
      has_system |= d.disk == DiskKind::kSystem;
    }
    if (!has_system && !c.system_top.empty()) {
      return Error(ErrorCode::kFailedPrecondition, "a system disk appeared since the prepare");
    }
    c.checkpoints.push_back(rec);
    c.next_generation = std::max(c.next_generation, prep.next_generation);
    return OkStatus();
  }));
  RETURN_IF_ERROR(RemoveUnreferenced(name, old_names));
  if (prep.automatic) {
    Result<std::vector<std::string>> pruned = ApplyRetentionLocked(name, may_rewrite_live_tops);
    if (!pruned.ok()) return pruned.error().WithContext("checkpoint " + rec.id + " taken, but pruning failed");
  }
  return rec;
}

Result<CheckpointRecord> Store::CommitCheckpoint(const WorkspaceLock& lock,
                                                 const PreparedCheckpoint& prepared,
                                                 bool vm_running) {
  return CommitCheckpointLocked(lock.name(), prepared, /*may_rewrite_live_tops=*/!vm_running);
}

Status Store::AbortCheckpoint(const WorkspaceLock& lock, const PreparedCheckpoint& prepared) {
  return CollectGarbage(lock.name());
}

Result<CheckpointRecord> Store::CreateCheckpoint(const std::string& name,
                                                 CheckpointOptions options) {
  ASSIGN_OR_RETURN(WorkspaceLock lock, LockWorkspace(name));
  RETURN_IF_ERROR(RequireStopped(name, lifecycle::Action::kCheckpoint));
  RETURN_IF_ERROR(CollectGarbage(name));
  ASSIGN_OR_RETURN(WorkspaceConfig c, LoadConfig(name));
  if (c.home_top.empty()) {
    return Error(ErrorCode::kFailedPrecondition, "workspace '" + name + "' has no home image",
                 "`cloister wipe-home " + name + "` makes a fresh one");
  }
  ASSIGN_OR_RETURN(PreparedCheckpoint prep, PrepareCheckpoint(lock, options));
  return CommitCheckpointLocked(name, prep, /*may_rewrite_live_tops=*/true);
}

Status Store::RestoreCheckpoint(const std::string& name, const std::string& id) {
  ASSIGN_OR_RETURN(WorkspaceLock lock, LockWorkspace(name));
  RETURN_IF_ERROR(RequireStopped(name, lifecycle::Action::kRestore));
  RETURN_IF_ERROR(CollectGarbage(name));
  ASSIGN_OR_RETURN(WorkspaceConfig c, LoadConfig(name));
  const CheckpointRecord* rec = c.FindCheckpoint(id);
  if (!rec) {
    return Error(ErrorCode::kNotFound, "workspace '" + name + "' has no checkpoint '" + id + "'",
                 "`cloister checkpoint ls " + name + "` lists them");
  }
  WorkspacePaths p = Paths(name);
  uint64_t gen = c.next_generation;
  struct NewTop {
    DiskKind disk;
    std::string file;
    std::string backing;
  };
  std::vector<NewTop> tops;
  for (DiskKind kind : {DiskKind::kSystem, DiskKind::kHome}) {
    const std::string& layer = kind == DiskKind::kSystem ? rec->system : rec->home;
    if (layer.empty()) continue;
    const DiskLayer* l = c.FindLayer(layer);
    std::string file = layout::LiveDiskFileName(StemOf(kind), gen++, layout::DiskFormat::kQcow2);
    RETURN_IF_ERROR(env_->RemoveFile(JoinPath(p.dir, file)));
    uint64_t vsize = kind == DiskKind::kSystem ? c.image.size : c.home_size;
    RETURN_IF_ERROR(
        CreateOverlay(env_, JoinPath(p.dir, file), JoinPath(p.dir, layer), l->format, vsize));
    tops.push_back({kind, file, layer});
  }
  RETURN_IF_ERROR(env_->RemoveFile(p.suspend_state));  // RAM image of the old disks
  RETURN_IF_ERROR(env_->RemoveFile(JoinPath(p.dir, layout::kSuspendKernelFile)));
  std::vector<std::string> dropped;
  RETURN_IF_ERROR(CommitDisks(name, [&](WorkspaceConfig& cfg) {
    for (std::string* top : {&cfg.system_top, &cfg.home_top}) {
      if (!top->empty()) {
        dropped.push_back(*top);
        EraseLayer(cfg, *top);
        top->clear();
      }
    }
    for (const NewTop& t : tops) {
      DiskLayer l;
      l.file = t.file;
      l.disk = t.disk;
      l.format = layout::DiskFormat::kQcow2;
      l.backing = t.backing;
      cfg.layers.push_back(l);
      (t.disk == DiskKind::kSystem ? cfg.system_top : cfg.home_top) = t.file;
    }
    cfg.next_generation = gen;
    return OkStatus();
  }));
  RETURN_IF_ERROR(RemoveUnreferenced(name, dropped));
  return Compact(name, /*may_rewrite_live_tops=*/true);
}

Status Store::RemoveCheckpointLocked(const std::string& name, const std::string& id,
                                     bool may_rewrite_live_tops) {
  // Re-running after a crash that came after the commit: the record is gone but its layers may
  // still wait to be merged. Finish that, and say it is done.
  ASSIGN_OR_RETURN(WorkspaceConfig current, LoadConfig(name));
  std::string dir = JoinPath(Paths(name).checkpoints_dir, id);
  if (!current.FindCheckpoint(id) && IsValidCheckpointId(id) && env_->Exists(dir)) {
    ASSIGN_OR_RETURN(std::vector<std::string> before, env_->ListDir(dir));
    RETURN_IF_ERROR(Compact(name, may_rewrite_live_tops));
    RETURN_IF_ERROR(CollectGarbage(name));
    ASSIGN_OR_RETURN(WorkspaceConfig after, LoadConfig(name));
    std::vector<std::string> left;
    if (env_->Exists(dir)) {
      ASSIGN_OR_RETURN(left, env_->ListDir(dir));
    }
    if (left != before || ConfigToJson(after) != ConfigToJson(current)) return OkStatus();
    // Only internal layers that cannot be merged are left: the checkpoint is long gone.
  }
  RETURN_IF_ERROR(CommitDisks(name, [&](WorkspaceConfig& c) -> Status {
    auto it = std::find_if(c.checkpoints.begin(), c.checkpoints.end(),
                           [&](const CheckpointRecord& r) { return r.id == id; });
    if (it == c.checkpoints.end()) {
      return Error(ErrorCode::kNotFound, "workspace '" + name + "' has no checkpoint '" + id + "'",
                   "`cloister checkpoint ls " + name + "` lists them");
    }
    c.checkpoints.erase(it);
    return OkStatus();
  }));
  RETURN_IF_ERROR(Compact(name, may_rewrite_live_tops));
  return CollectGarbage(name);
}

Status Store::RemoveCheckpoint(const std::string& name, const std::string& id) {
  ASSIGN_OR_RETURN(WorkspaceLock lock, LockWorkspace(name));
  RETURN_IF_ERROR(RequireStopped(name, lifecycle::Action::kCheckpointRemove));
  RETURN_IF_ERROR(CollectGarbage(name));
  return RemoveCheckpointLocked(name, id, /*may_rewrite_live_tops=*/true);
}

Result<std::vector<std::string>> Store::ApplyRetentionLocked(const std::string& name,
                                                             bool may_rewrite_live_tops) {
  ASSIGN_OR_RETURN(WorkspaceConfig c, LoadConfig(name));
  std::vector<const CheckpointRecord*> autos;
  std::vector<int64_t> times;
  for (const CheckpointRecord& r : c.checkpoints) {
    if (!r.automatic) continue;
    autos.push_back(&r);
    times.push_back(r.created);
  }
  std::vector<bool> keep = SelectRetained(times, Now());
  std::vector<std::string> doomed;
  for (size_t i = 0; i < autos.size(); ++i) {
    if (!keep[i]) doomed.push_back(autos[i]->id);
  }
  if (doomed.empty()) return doomed;
  RETURN_IF_ERROR(CommitDisks(name, [&](WorkspaceConfig& cfg) {
    std::set<std::string> d(doomed.begin(), doomed.end());
    cfg.checkpoints.erase(std::remove_if(cfg.checkpoints.begin(), cfg.checkpoints.end(),
                                         [&](const CheckpointRecord& r) { return d.count(r.id); }),
                          cfg.checkpoints.end());
    return OkStatus();
  }));
  RETURN_IF_ERROR(Compact(name, may_rewrite_live_tops));
  RETURN_IF_ERROR(CollectGarbage(name));
  return doomed;
}

Result<std::vector<std::string>> Store::ApplyRetention(const std::string& name) {
  ASSIGN_OR_RETURN(WorkspaceLock lock, LockWorkspace(name));
  RETURN_IF_ERROR(RequireStopped(name, lifecycle::Action::kPrune));
  RETURN_IF_ERROR(CollectGarbage(name));
  return ApplyRetentionLocked(name, /*may_rewrite_live_tops=*/true);
}

}  // namespace cloister
