// Garbage of interrupted verbs (a workspace's and the store's: staging/, trash/, the MAC
// registry) and the merging of disk layers (Compact).
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

using store_internal::IsDiskFileName;
using store_internal::ReferencedFiles;
using store_internal::PinnedFiles;
using store_internal::EraseLayer;
using store_internal::MutableLayer;

// ---------------------------------------------------------------------------------------------
// Garbage: files of interrupted verbs

Status Store::RemoveUnreferenced(const std::string& name, const std::vector<std::string>& files) {
  WorkspacePaths p = Paths(name);
  ASSIGN_OR_RETURN(WorkspaceConfig c, ReadConfigAt(p.dir));
  std::set<std::string> refs = ReferencedFiles(c);
  for (const std::string& f : files) {
    if (f.empty() || refs.count(f) || !IsSafeRelativePath(f)) continue;
    RETURN_IF_ERROR(env_->RemoveFile(JoinPath(p.dir, f)));
  }
  return OkStatus();
}

Status Store::CollectGarbage(const std::string& name) {
  WorkspacePaths p = Paths(name);
  ASSIGN_OR_RETURN(WorkspaceConfig c, ReadConfigAt(p.dir));
  std::set<std::string> refs = ReferencedFiles(c);
  ASSIGN_OR_RETURN(std::vector<std::string> names, env_->ListDir(p.dir));
  std::string config_tmp = std::string(layout::kConfigFile) + std::string(layout::kTempSuffix);
  for (const std::string& n : names) {
    if ((IsDiskFileName(n) && !refs.count(n)) || n == config_tmp) {
      RETURN_IF_ERROR(env_->RemoveFile(JoinPath(p.dir, n)));
    }
  }
  ASSIGN_OR_RETURN(FileInfo cinfo, env_->Stat(p.checkpoints_dir));
  if (cinfo.is_dir) {
    ASSIGN_OR_RETURN(std::vector<std::string> ids, env_->ListDir(p.checkpoints_dir));
    for (const std::string& id : ids) {
      std::string sub = JoinPath(p.checkpoints_dir, id);
      ASSIGN_OR_RETURN(FileInfo sinfo, env_->Stat(sub));
      if (!sinfo.is_dir) {
        RETURN_IF_ERROR(env_->RemoveFile(sub));
        continue;
      }
      ASSIGN_OR_RETURN(std::vector<std::string> files, env_->ListDir(sub));
      size_t kept = 0;
      for (const std::string& f : files) {
        std::string rel = std::string(layout::kCheckpointsDir) + "/" + id + "/" + f;
        if (refs.count(rel)) {
          ++kept;
        } else {
          RETURN_IF_ERROR(env_->RemoveAll(JoinPath(sub, f)));
        }
      }
      if (kept == 0) RETURN_IF_ERROR(env_->RemoveDir(sub));
    }
  }
  return OkStatus();
}

Result<uint32_t> Store::QemuId(const std::string& name) {
  ASSIGN_OR_RETURN(WorkspaceConfig c, LoadConfig(name));
  MacRegistry registry(env_, MacRegistryPath());
  ASSIGN_OR_RETURN(std::vector<MacEntry> entries, registry.Load());
  for (const MacEntry& e : entries) {
    if (e.id == c.id && e.qemu_id) return *e.qemu_id;
  }
  // An entry without an id (a registry from before ids) is given one under the store lock.
  ASSIGN_OR_RETURN(std::unique_ptr<FileLock> store_lock, LockStore());
  return registry.QemuIdOf(c.id);
}

Status Store::FinishTrashEntry(const std::string& entry) {
  // trash/NAME.ID: release the MAC of ID, then delete.
  size_t dot = entry.rfind('.');
  if (dot != std::string::npos) {
    MacRegistry registry(env_, MacRegistryPath());
    RETURN_IF_ERROR(registry.Release(entry.substr(dot + 1)));
  }
  return env_->RemoveAll(JoinPath(TrashDir(), entry));
}

Status Store::CollectStoreGarbage() {
  // Staging dirs of creates that died (their lock is free).
  ASSIGN_OR_RETURN(std::vector<std::string> staged, env_->ListDir(StagingDir()));
  for (const std::string& s : staged) {
    std::string dir = JoinPath(StagingDir(), s);
    ASSIGN_OR_RETURN(FileInfo info, env_->Stat(dir));
    if (info.is_dir) {
      Result<std::unique_ptr<FileLock>> held =
          env_->LockFile(JoinPath(dir, layout::kLockFile), /*wait=*/false);
      if (!held.ok() && held.error().code() == ErrorCode::kBusy) continue;  // in progress
    }
    RETURN_IF_ERROR(env_->RemoveAll(dir));
  }
  ASSIGN_OR_RETURN(std::vector<std::string> trash, env_->ListDir(TrashDir()));
  for (const std::string& t : trash) RETURN_IF_ERROR(FinishTrashEntry(t));
  // MAC reservations whose workspace does not exist (a create that died after reserving).
  std::set<std::string> live;
  ASSIGN_OR_RETURN(std::vector<std::string> names, env_->ListDir(WorkspacesDir()));
  for (const std::string& n : names) {
    Result<WorkspaceConfig> c = ReadConfigAt(JoinPath(WorkspacesDir(), n));
    if (!c.ok()) return OkStatus();  // cannot tell who owns what: keep every reservation
    live.insert(c->id);
  }
  MacRegistry registry(env_, MacRegistryPath());
  Result<size_t> dropped = registry.Retain(live);
  if (!dropped.ok()) return dropped.error();
  return OkStatus();
}

// ---------------------------------------------------------------------------------------------
// Layer merging

Status Store::Compact(const std::string& name, bool may_rewrite_live_tops) {
  WorkspacePaths p = Paths(name);
  for (int round = 0; round < 10000; ++round) {
    ASSIGN_OR_RETURN(WorkspaceConfig c, ReadConfigAt(p.dir));
    std::set<std::string> pinned = PinnedFiles(c);
    std::map<std::string, std::vector<const DiskLayer*>> children;
    for (const DiskLayer& l : c.layers) {
      if (!l.backing.empty()) children[l.backing].push_back(&l);
    }
    const DiskLayer* victim = nullptr;
    bool merge = false;
    for (const DiskLayer& l : c.layers) {
      if (pinned.count(l.file)) continue;
      const auto& kids = children[l.file];
      if (kids.empty()) {
        victim = &l;
        break;
      }
      if (l.backing.empty() && !l.on_base) continue;  // a raw bottom layer stays as internal
      // While a VM runs, every layer of its chains is open in QEMU (the backing files read-only):
      // no merge then, only deletion of layers nothing reads through. EnsureSystemDisk merges at
      // the next start.
      if (!may_rewrite_live_tops) continue;
      victim = &l;
      merge = true;
      break;
    }
    if (!victim) return OkStatus();
    DiskLayer gone = *victim;
    std::vector<std::string> kid_files;
    for (const DiskLayer* k : children[gone.file]) kid_files.push_back(k->file);
    if (merge) {
      std::string below = gone.on_base ? c.image.path : JoinPath(p.dir, gone.backing);
      layout::DiskFormat below_format = layout::DiskFormat::kRaw;
      if (!gone.on_base) below_format = c.FindLayer(gone.backing)->format;
      for (const std::string& k : kid_files) {
        RETURN_IF_ERROR(RebaseOverlay(env_, JoinPath(p.dir, k), below, below_format));
      }
    }
    RETURN_IF_ERROR(CommitDisks(name, [&](WorkspaceConfig& cfg) {
      for (const std::string& k : kid_files) {
        if (DiskLayer* kl = MutableLayer(cfg, k)) {
          kl->backing = gone.backing;
          kl->on_base = gone.on_base;
        }
      }
      EraseLayer(cfg, gone.file);
      return OkStatus();
    }));
    RETURN_IF_ERROR(RemoveUnreferenced(name, {gone.file}));
  }
  return Error(ErrorCode::kInternal, "layer compaction did not converge");
}

}  // namespace cloister
