// Store::Fork (store.h): a new workspace from the disks of another.
//
// The discipline is Create's: the fork is built in staging/NAME.ID (locked) and committed by one
// rename into workspaces/ under the store lock, after its MAC is reserved and its config written;
// a crash leaves a staging directory the next store garbage collection deletes. The source is
// only read.
//
// SECURITY: a fork owns every byte it reads. Each layer of the source's live chains (or of one
// checkpoint's) is copied into the fork's directory (FICLONE, else a sparse copy: Env::CopyFile)
// and each copied qcow2 layer's backing name is rewritten to the fork's own copy of the layer
// below (or the public base image), so no file of the fork names a file of the source's
// directory, and `rm SOURCE` never breaks a fork. Identity is never copied: new id, MAC, SSH key
// and sshd host key; the secrets file is the fork's own (credentials only with
// --with-credentials, re-encrypted by the copy_credentials hook); checkpoints, the saved RAM
// image, logs and the run directory stay with the source.
#include <openssl/rand.h>

#include <algorithm>
#include <cstdlib>

#include "base/strings.h"
#include "store/image_ref.h"
#include "store/mac.h"
#include "store/store.h"

namespace cloister {
namespace {

std::string NewWorkspaceId() {
  std::string raw(16, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(raw.data()), static_cast<int>(raw.size())) != 1) {
    std::abort();  // no entropy source: ids would collide (as store.cc's RandomHex)
  }
  return HexEncode(raw);
}

// The layers under `top`, top first. A chain longer than the config's layer list is a cycle.
Result<std::vector<DiskLayer>> ChainOf(const WorkspaceConfig& c, const std::string& top) {
  std::vector<DiskLayer> chain;
  for (std::string file = top; !file.empty();) {
    const DiskLayer* l = c.FindLayer(file);
    if (!l || !IsSafeRelativePath(l->file) || chain.size() > c.layers.size()) {
      return Error(ErrorCode::kCorrupt,
                   "workspace " + c.name + ": the disk chain under " + top + " is broken at " + file,
                   "`cloister describe " + c.name + "` shows its layers");
    }
    chain.push_back(*l);
    file = l->backing;
  }
  return chain;
}

bool SameFile(const FileInfo& a, const FileInfo& b) {
  return a.exists && b.exists && a.inode == b.inode && a.device == b.device &&
         a.apparent == b.apparent && a.mtime_ns == b.mtime_ns;
}

}  // namespace

namespace fork_internal {
// What the copy checks did not change under it: a source file, by identity.
struct Seen {
  std::string path;
  FileInfo info;
};
}  // namespace fork_internal

struct Store::ForkCopy {
  std::string source_dir;
  uint64_t generation = 1;  // next live-disk generation in the fork
  uint64_t total = 0;
  uint64_t done = 0;
  bool reflinked = true;
  std::vector<fork_internal::Seen> seen;
  const std::function<void(uint64_t, uint64_t)>* progress = nullptr;
};

// Copies the chain under `top` bottom up as the fork's live-disk files, each qcow2 layer rebased
// (header only, `qemu-img rebase -u`) onto the fork's copy below it, as it will be named once
// the staging directory is renamed to `final_dir`. The copied layers above the bottom are
// internal layers of the fork; its first start merges them (Compact).
Status Store::CopyChainForFork(const WorkspaceConfig& source, const std::string& top,
                               DiskKind kind, const std::string& staging,
                               const std::string& final_dir, ForkCopy& copy,
                               WorkspaceConfig& fork) {
  if (top.empty()) return OkStatus();
  ASSIGN_OR_RETURN(std::vector<DiskLayer> chain, ChainOf(source, top));
  std::string below;  // the fork's file under the layer being copied ("" at the bottom)
  layout::DiskFormat below_format = layout::DiskFormat::kRaw;
  std::string stem(kind == DiskKind::kSystem ? layout::kSystemDiskStem : layout::kHomeImageStem);
  for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
    const DiskLayer& l = *it;
    std::string from = JoinPath(copy.source_dir, l.file);
    ASSIGN_OR_RETURN(FileInfo before, env_->Stat(from));
    if (!before.is_regular) {
      return Error(ErrorCode::kCorrupt, "workspace " + source.name + ": layer " + l.file +
                                            " is missing or not a file");
    }
    DiskLayer out;
    out.file = layout::LiveDiskFileName(stem, copy.generation++, l.format);
    out.disk = kind;
    out.format = l.format;
    out.backing = below;
    out.on_base = l.on_base;
    std::string to = JoinPath(staging, out.file);
    uint64_t start = copy.done;
    std::function<void(uint64_t)> step;
    if (copy.progress && *copy.progress) {
      step = [&copy, start](uint64_t n) { (*copy.progress)(start + n, copy.total); };
    }
    ASSIGN_OR_RETURN(Env::CopyMethod method, env_->CopyFile(from, to, step));
    copy.reflinked &= method == Env::CopyMethod::kReflink;
    copy.done = start + before.allocated;
    if (l.format == layout::DiskFormat::kQcow2) {
      // SECURITY: the copy still names the source's file below it; point it at the fork's own
      // copy (or the base image) before anything can open it.
      std::string backing = l.on_base ? source.image.path : JoinPath(final_dir, below);
      layout::DiskFormat fmt = l.on_base ? layout::DiskFormat::kRaw : below_format;
      if (!l.on_base && below.empty()) {
        return Error(ErrorCode::kCorrupt, "workspace " + source.name + ": qcow2 layer " + l.file +
                                              " has nothing below it");
      }
      RETURN_IF_ERROR(env_->RunToolChecked({"qemu-img", "rebase", "-u", "-f", "qcow2", "-F",
                                            layout::DiskFormatName(fmt), "-b", backing, to}));
    }
    fork.layers.push_back(out);
    below = out.file;
    below_format = out.format;
  }
  (kind == DiskKind::kSystem ? fork.system_top : fork.home_top) = below;
  return OkStatus();
}

namespace {

// A running source's checkpoint is not under our lock: its files must be the ones we read.
Status CheckSourceUnchanged(Env* env, const WorkspaceConfig& again, const ForkRequest& req,
                            const std::vector<fork_internal::Seen>& seen) {
  if (!req.checkpoint.empty() && !again.FindCheckpoint(req.checkpoint)) {
    return Error(ErrorCode::kFailedPrecondition,
                 "checkpoint " + req.checkpoint + " of '" + req.source +
                     "' was removed while it was being copied",
                 "fork again");
  }
  for (const fork_internal::Seen& s : seen) {
    ASSIGN_OR_RETURN(FileInfo now, env->Stat(s.path));
    if (!SameFile(s.info, now)) {
      return Error(ErrorCode::kFailedPrecondition, s.path + " changed while it was being copied",
                   "fork again");
    }
  }
  return OkStatus();
}

}  // namespace

Result<ForkResult> Store::Fork(const ForkRequest& req) {
  RETURN_IF_ERROR(ValidateWorkspaceName(req.source));
  RETURN_IF_ERROR(ValidateWorkspaceName(req.name));
  if (req.with_credentials && !options_.copy_credentials) {
    return Error(ErrorCode::kUnavailable, "this cloister cannot copy credentials into a fork",
                 "fork without --with-credentials and add them with `cloister cred add`");
  }
  RETURN_IF_ERROR(EnsureInitialized());
  std::optional<WorkspaceLock> source_lock;
  if (req.checkpoint.empty()) {
    ASSIGN_OR_RETURN(WorkspaceLock lock, LockWorkspace(req.source));
    source_lock.emplace(std::move(lock));
    RETURN_IF_ERROR(RequireStopped(req.source, lifecycle::Action::kCheckpoint));
  }
  ASSIGN_OR_RETURN(WorkspaceConfig src, LoadConfig(req.source));
  if (src.compromised) {
    // SECURITY: a fork of a compromised workspace would carry whatever leaked into a new one.
    return Error(ErrorCode::kCompromised,
                 "workspace '" + req.source + "' is marked compromised (" +
                     src.compromised_reason + "); it cannot be forked",
                 "wipe it first: `cloister wipe " + req.source + "`");
  }
  std::string system_top = src.system_top, home_top = src.home_top;
  if (!req.checkpoint.empty()) {
    const CheckpointRecord* rec = src.FindCheckpoint(req.checkpoint);
    if (!rec) {
      return Error(ErrorCode::kNotFound, "workspace '" + req.source + "' has no checkpoint '" +
                                             req.checkpoint + "'");
    }
    system_top = rec->system;
    home_top = rec->home;
  }
  if (home_top.empty()) {
    return Error(ErrorCode::kFailedPrecondition, "workspace '" + req.source + "' has no home image",
                 "`cloister wipe-home " + req.source + "` makes a fresh one");
  }
  WorkspacePaths final_paths = Paths(req.name);
  auto exists_error = [&] {
    return Error(ErrorCode::kAlreadyExists, "workspace '" + req.name + "' already exists",
                 "pick another name, or delete it first with `cloister rm " + req.name + "`");
  };
  if (env_->Exists(final_paths.dir)) return exists_error();
  RETURN_IF_ERROR(CheckBaseUnchanged(env_, src.image));

  ForkCopy copy;
  copy.source_dir = Paths(req.source).dir;
  copy.progress = &req.progress;
  for (const std::string& top : {system_top, home_top}) {
    if (top.empty()) continue;
    ASSIGN_OR_RETURN(std::vector<DiskLayer> chain, ChainOf(src, top));
    for (const DiskLayer& l : chain) {
      std::string path = JoinPath(copy.source_dir, l.file);
      ASSIGN_OR_RETURN(FileInfo fi, env_->Stat(path));
      copy.total += fi.allocated;
      copy.seen.push_back({path, fi});
    }
  }

  WorkspaceConfig c;
  c.name = req.name;
  c.id = NewWorkspaceId();
  c.created = Now();
  c.image = src.image;
  c.memory_mib = src.memory_mib;
  c.cpus = src.cpus;
  c.home_size = src.home_size;
  c.volumes = src.volumes;
  c.tool = src.tool;
  c.extra = src.extra.is_object() ? src.extra : nlohmann::json::object();
  for (const std::string& key : req.drop_settings) c.extra.erase(key);

  std::string staging = JoinPath(StagingDir(), req.name + "." + c.id);
  std::unique_ptr<FileLock> staging_lock;
  {
    ASSIGN_OR_RETURN(std::unique_ptr<FileLock> store_lock, LockStore());
    RETURN_IF_ERROR(CollectStoreGarbage());
    ASSIGN_OR_RETURN(uint64_t free_bytes, env_->FreeSpace(root_));
    if (free_bytes < options_.min_free_bytes + copy.total) {
      return Error(ErrorCode::kNoSpace,
                   "not enough free space in " + root_ + " for a fork of '" + req.source + "': " +
                       FormatSize(free_bytes) + " free, it may need " +
                       FormatSize(copy.total + options_.min_free_bytes),
                   "free space on the store's filesystem (a filesystem with reflinks, such as "
                   "XFS or btrfs, makes forks nearly free)");
    }
    RETURN_IF_ERROR(env_->CreateDir(staging, 0700));
    Result<std::unique_ptr<FileLock>> held =
        env_->LockFile(JoinPath(staging, layout::kLockFile), /*wait=*/false);
    if (!held.ok()) {
      (void)env_->RemoveAll(staging);  // best effort; GC finishes it otherwise
      return held.error();
    }
    staging_lock = std::move(*held);
  }

  auto build = [&]() -> Status {
    RETURN_IF_ERROR(CopyChainForFork(src, system_top, DiskKind::kSystem, staging,
                                     final_paths.dir, copy, c));
    RETURN_IF_ERROR(CopyChainForFork(src, home_top, DiskKind::kHome, staging, final_paths.dir,
                                     copy, c));
    c.next_generation = copy.generation;
    ASSIGN_OR_RETURN(WorkspaceConfig again, LoadConfig(req.source));
    RETURN_IF_ERROR(CheckSourceUnchanged(env_, again, req, copy.seen));
    RETURN_IF_ERROR(MakeSshKey(req.name, staging));
    RETURN_IF_ERROR(MakeSshdHostKey(req.name, staging));
    if (req.with_credentials) {
      Status s = options_.copy_credentials(req.source, copy.source_dir, req.name, staging);
      if (!s.ok()) return s.error().WithContext("copying credentials");
    }
    ASSIGN_OR_RETURN(std::unique_ptr<FileLock> store_lock, LockStore());
    MacRegistry registry(env_, MacRegistryPath());
    Result<std::string> mac = registry.Reserve(req.name, c.id);
    Status renamed = mac.ok() ? OkStatus() : Status(mac.error());
    if (renamed.ok()) {
      c.mac = *mac;
      renamed = WriteConfigAt(staging, c);
    }
    if (renamed.ok()) renamed = env_->Rename(staging, final_paths.dir, /*no_replace=*/true);
    if (!renamed.ok()) {
      (void)registry.Release(c.id);  // best effort; GC drops it otherwise
      if (renamed.error().code() == ErrorCode::kAlreadyExists) return exists_error();
      return renamed;
    }
    (void)env_->SyncDir(WorkspacesDir());  // committed whatever the directory fsync says
    return OkStatus();
  };
  Status built = build();
  staging_lock.reset();
  if (!built.ok()) {
    (void)env_->RemoveAll(staging);  // best effort; GC finishes it otherwise
    return built.error();
  }
  ForkResult result;
  result.config = c;
  result.copied_bytes = copy.total;
  result.reflinked = copy.reflinked;
  return result;
}

}  // namespace cloister
