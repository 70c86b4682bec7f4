// The disposal verbs: reset, wipe-home, wipe and rm (store/store.h).
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

using store_internal::RandomHex;
using store_internal::NoSuchWorkspace;
using store_internal::EraseLayer;

// ---------------------------------------------------------------------------------------------
// reset / wipe-home / wipe / rm

Status Store::Reset(const std::string& name) {
  ASSIGN_OR_RETURN(WorkspaceLock lock, LockWorkspace(name));
  RETURN_IF_ERROR(RequireStopped(name, lifecycle::Action::kReset));
  RETURN_IF_ERROR(CollectGarbage(name));
  RETURN_IF_ERROR(env_->RemoveFile(Paths(name).suspend_state));  // RAM image of the old disks
  RETURN_IF_ERROR(env_->RemoveFile(JoinPath(Paths(name).dir, layout::kSuspendKernelFile)));
  std::string old;
  RETURN_IF_ERROR(CommitDisks(name, [&](WorkspaceConfig& c) {
    old = c.system_top;
    if (old.empty()) return OkStatus();
    EraseLayer(c, old);
    c.system_top.clear();
    return OkStatus();
  }));
  RETURN_IF_ERROR(RemoveUnreferenced(name, {old}));
  return Compact(name, /*may_rewrite_live_tops=*/true);
}

// The shape of both home-replacing verbs, so that their crash-tested order of steps is one: under
// the workspace lock with the VM stopped, garbage collected, a fresh empty home image made beside
// the live one and the saved RAM image (which refers to the old disks) removed; then one config
// commit (the commit point) in which `drop` takes out the layers that go, every checkpoint goes
// (each holds a copy of the old home) and the fresh home becomes the live one; then the dropped
// files removed, the chain compacted if `compact`, garbage collected again and a new SSH key.
Status Store::ReplaceHome(
    const std::string& name, lifecycle::Action action, bool compact,
    const std::function<void(WorkspaceConfig&, std::vector<std::string>* dropped)>& drop) {
  ASSIGN_OR_RETURN(WorkspaceLock lock, LockWorkspace(name));
  RETURN_IF_ERROR(RequireStopped(name, action));
  RETURN_IF_ERROR(CollectGarbage(name));
  ASSIGN_OR_RETURN(WorkspaceConfig c, LoadConfig(name));
  WorkspacePaths p = Paths(name);
  uint64_t gen = c.next_generation;
  ASSIGN_OR_RETURN(std::string fresh, NewHomeImage(p.dir, c, gen));
  RETURN_IF_ERROR(env_->RemoveFile(p.suspend_state));  // RAM image of the old disks
  RETURN_IF_ERROR(env_->RemoveFile(JoinPath(p.dir, layout::kSuspendKernelFile)));
  std::vector<std::string> dropped;
  RETURN_IF_ERROR(CommitDisks(name, [&](WorkspaceConfig& cfg) {
    drop(cfg, &dropped);
    cfg.checkpoints.clear();  // each one holds a copy of the old home
    DiskLayer l;
    l.file = fresh;
    l.disk = DiskKind::kHome;
    l.format = layout::DiskFormat::kRaw;
    cfg.layers.push_back(l);
    cfg.home_top = fresh;
    cfg.next_generation = gen + 1;
    return OkStatus();
  }));
  RETURN_IF_ERROR(RemoveUnreferenced(name, dropped));
  if (compact) RETURN_IF_ERROR(Compact(name, /*may_rewrite_live_tops=*/true));
  RETURN_IF_ERROR(CollectGarbage(name));
  RETURN_IF_ERROR(DestroyBrowserProfile(name, p.dir));
  RETURN_IF_ERROR(MakeSshKey(name, p.dir));
  // `wipe` also gives the guest's sshd a new identity (pins made before no longer match).
  if (action == lifecycle::Action::kWipe) return MakeSshdHostKey(name, p.dir);
  return OkStatus();
}

Status Store::WipeHome(const std::string& name) {
  return ReplaceHome(name, lifecycle::Action::kWipeHome, /*compact=*/true,
                     [](WorkspaceConfig& cfg, std::vector<std::string>* dropped) {
                       if (cfg.home_top.empty()) return;
                       dropped->push_back(cfg.home_top);
                       EraseLayer(cfg, cfg.home_top);
                     });
}

Status Store::Wipe(const std::string& name) {
  return ReplaceHome(name, lifecycle::Action::kWipe, /*compact=*/false,
                     [](WorkspaceConfig& cfg, std::vector<std::string>* dropped) {
                       for (const DiskLayer& l : cfg.layers) dropped->push_back(l.file);
                       cfg.layers.clear();
                       cfg.system_top.clear();
                       cfg.compromised = false;  // a wiped workspace starts clean
                       cfg.compromised_reason.clear();
                       cfg.compromised_at = 0;
                     });
}

Status Store::Remove(const std::string& name) {
  RETURN_IF_ERROR(ValidateWorkspaceName(name));
  WorkspacePaths p = Paths(name);
  ASSIGN_OR_RETURN(FileInfo info, env_->Stat(p.dir));
  if (!info.exists) {
    // A previous rm may have died after its commit (the rename into trash/): finish it.
    ASSIGN_OR_RETURN(FileInfo tinfo, env_->Stat(TrashDir()));
    bool finished = false;
    if (tinfo.is_dir) {
      ASSIGN_OR_RETURN(std::unique_ptr<FileLock> store_lock, LockStore());
      ASSIGN_OR_RETURN(std::vector<std::string> trash, env_->ListDir(TrashDir()));
      for (const std::string& t : trash) {
        size_t dot = t.rfind('.');
        if (dot != std::string::npos && t.substr(0, dot) == name) {
          RETURN_IF_ERROR(FinishTrashEntry(t));
          finished = true;
        }
      }
    }
    if (finished) return OkStatus();
    return NoSuchWorkspace(name);
  }
  // Not LockWorkspace: a directory whose config.json is damaged or missing can be deleted too.
  Result<std::unique_ptr<FileLock>> lock = env_->LockFile(p.lock, /*wait=*/false);
  if (!lock.ok()) {
    if (lock.error().code() == ErrorCode::kBusy) return LockWorkspace(name).error();
    return lock.error();
  }
  RETURN_IF_ERROR(RequireStopped(name, lifecycle::Action::kRemove));
  RETURN_IF_ERROR(EnsureInitialized());
  Result<WorkspaceConfig> c = ReadConfigAt(p.dir);
  // A workspace with a damaged config can still be deleted; its MAC is then released by the
  // next store garbage collection.
  std::string id = c.ok() && !c->id.empty() && IsSafeRelativePath(c->id) ? c->id : RandomHex(16);
  std::string entry = name + "." + id;
  {
    ASSIGN_OR_RETURN(std::unique_ptr<FileLock> store_lock, LockStore());
    RETURN_IF_ERROR(env_->Rename(p.dir, JoinPath(TrashDir(), entry), /*no_replace=*/true));
    RETURN_IF_ERROR(env_->SyncDir(WorkspacesDir()));
    RETURN_IF_ERROR(FinishTrashEntry(entry));
  }
  return OkStatus();
}

}  // namespace cloister
