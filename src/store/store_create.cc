// `create`: a workspace built in staging/ and committed by one rename (store/store.h), with the
// hooks that make its keys.
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

using store_internal::kMinHomeSize;
using store_internal::kMaxHomeSize;
using store_internal::RandomHex;

// ---------------------------------------------------------------------------------------------
// create / ls / describe

Result<std::string> Store::NewHomeImage(const std::string& dir, const WorkspaceConfig& config,
                                        uint64_t generation) {
  std::string file =
      layout::LiveDiskFileName(layout::kHomeImageStem, generation, layout::DiskFormat::kRaw);
  std::string path = JoinPath(dir, file);
  RETURN_IF_ERROR(env_->RemoveFile(path));  // a leftover of a crash under the same name
  RETURN_IF_ERROR(MakeHomeImage(env_, path, config.home_size,
                                DeriveUuid(config.id + "/home/" + std::to_string(generation)),
                                config.created));
  return file;
}

Status Store::MakeSshKey(const std::string& name, const std::string& dir) {
  if (!options_.make_ssh_key) return OkStatus();
  Status s = options_.make_ssh_key(name, dir);
  if (!s.ok()) return s.error().WithContext("making the workspace SSH key");
  return OkStatus();
}

// SECURITY: wipe-home and wipe destroy the browser's kept profile (its cookies are logins).
Status Store::DestroyBrowserProfile(const std::string& name, const std::string& dir) {
  if (!options_.destroy_browser_profile) {
    return env_->RemoveFile(JoinPath(dir, layout::kBrowserProfileFile));
  }
  Status s = options_.destroy_browser_profile(name, dir);
  if (!s.ok()) return s.error().WithContext("destroying the browser profile");
  return OkStatus();
}

Status Store::MakeSshdHostKey(const std::string& name, const std::string& dir) {
  if (!options_.make_sshd_host_key) return OkStatus();
  Status s = options_.make_sshd_host_key(name, dir);
  if (!s.ok()) return s.error().WithContext("making the workspace's sshd host key");
  return OkStatus();
}

Result<WorkspaceConfig> Store::Create(const CreateRequest& req) {
  RETURN_IF_ERROR(ValidateWorkspaceName(req.name));
  if (req.memory_mib < 128 || req.memory_mib > (1u << 20)) {
    return Error(ErrorCode::kInvalidArgument,
                 "--memory " + std::to_string(req.memory_mib) + " MiB is out of range",
                 "use between 128 and 1048576 MiB");
  }
  if (req.cpus < 1 || req.cpus > 256) {
    return Error(ErrorCode::kInvalidArgument, "--cpus " + std::to_string(req.cpus) +
                                                  " is out of range", "use between 1 and 256");
  }
  if (req.home_size < kMinHomeSize || req.home_size > kMaxHomeSize || req.home_size % 4096) {
    return Error(ErrorCode::kInvalidArgument,
                 "--home-size " + FormatSize(req.home_size) + " is out of range",
                 "use a multiple of 4 KiB between 64 MiB and 16 TiB, e.g. 64G");
  }
  RETURN_IF_ERROR(ParseAgentTool(req.tool));
  for (const Volume& v : req.volumes) {
    ASSIGN_OR_RETURN(FileInfo vi, env_->Stat(v.host));
    if (!vi.is_dir) {
      return Error(ErrorCode::kNotFound, "host folder " + v.host + " does not exist",
                   "create it, or fix the -v argument");
    }
  }
  RETURN_IF_ERROR(EnsureInitialized());
  WorkspacePaths final_paths = Paths(req.name);
  auto exists_error = [&] {
    return Error(ErrorCode::kAlreadyExists, "workspace '" + req.name + "' already exists",
                 "pick another name, or delete it first with `cloister rm " + req.name + "`");
  };
  if (env_->Exists(final_paths.dir)) return exists_error();

  WorkspaceConfig c;
  c.name = req.name;
  c.id = RandomHex(16);
  std::string staging = JoinPath(StagingDir(), req.name + "." + c.id);
  ImageIdentity image;
  std::unique_ptr<FileLock> staging_lock;
  {
    // The image is resolved and the staging dir created and locked under the store lock, so
    // `image rm` (IfImageUnused, also under the store lock) either sees this create in staging/
    // or runs before it resolves; and no concurrent GC takes the fresh staging dir for garbage.
    ASSIGN_OR_RETURN(std::unique_ptr<FileLock> store_lock, LockStore());
    RETURN_IF_ERROR(CollectStoreGarbage());
    ASSIGN_OR_RETURN(image, options_.resolve_image
                                ? options_.resolve_image(req.image)
                                : ResolveImage(env_, ImagesDir(), req.image));
    ASSIGN_OR_RETURN(uint64_t free_bytes, env_->FreeSpace(root_));
    if (free_bytes < options_.min_free_bytes) {
      return Error(ErrorCode::kNoSpace,
                   "not enough free space in " + root_ + ": " + FormatSize(free_bytes) +
                       " free, cloister needs at least " + FormatSize(options_.min_free_bytes),
                   "free space on the store's filesystem, or use another --store");
    }
    RETURN_IF_ERROR(env_->CreateDir(staging, 0700));
    Result<std::unique_ptr<FileLock>> held =
        env_->LockFile(JoinPath(staging, layout::kLockFile), /*wait=*/false);
    if (!held.ok()) {
      Status cleaned = env_->RemoveAll(staging);  // best effort; GC finishes it otherwise
      (void)cleaned;
      return held.error();
    }
    staging_lock = std::move(*held);
  }
  c.created = Now();
  c.image = image;
  c.memory_mib = req.memory_mib;
  c.cpus = req.cpus;
  c.home_size = req.home_size;
  c.volumes = req.volumes;
  c.tool = req.tool;

  auto build = [&]() -> Status {
    // System disk (generation 1), home image (generation 2), SSH key.
    std::string stem = JoinPath(staging, std::string(layout::kSystemDiskStem) + ".1");
    ASSIGN_OR_RETURN(layout::DiskFormat fmt, CloneSystemDisk(env_, image.path, image.size, stem,
                                                             options_.system_disk_mode));
    // The base was verified before the clone; a write to it since then would make the clone
    // (or the overlay's view of it) differ from the recorded identity.
    RETURN_IF_ERROR(CheckBaseUnchanged(env_, image));
    DiskLayer sys;
    sys.file = layout::LiveDiskFileName(layout::kSystemDiskStem, 1, fmt);
    sys.disk = DiskKind::kSystem;
    sys.format = fmt;
    sys.on_base = fmt == layout::DiskFormat::kQcow2;
    ASSIGN_OR_RETURN(std::string home_file, NewHomeImage(staging, c, 2));
    DiskLayer home;
    home.file = home_file;
    home.disk = DiskKind::kHome;
    home.format = layout::DiskFormat::kRaw;
    c.layers = {sys, home};
    c.system_top = sys.file;
    c.home_top = home.file;
    c.next_generation = 3;
    RETURN_IF_ERROR(MakeSshKey(req.name, staging));
    RETURN_IF_ERROR(MakeSshdHostKey(req.name, staging));
    // Commit under the store lock: reserve the MAC, write the config, rename into place.
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
      Status released = registry.Release(c.id);  // best effort; GC drops it otherwise
      (void)released;
      if (renamed.error().code() == ErrorCode::kAlreadyExists) return exists_error();
      return renamed;
    }
    // Committed: the workspace exists whatever the directory fsync says.
    Status synced = env_->SyncDir(WorkspacesDir());
    (void)synced;
    return OkStatus();
  };
  Status built = build();
  staging_lock.reset();
  if (!built.ok()) {
    Status cleaned = env_->RemoveAll(staging);  // best effort; GC finishes it otherwise
    (void)cleaned;
    return built.error();
  }
  return c;
}

Result<std::vector<std::string>> Store::IfImageUnused(const std::string& image_dir,
                                                      const std::function<Status()>& fn) {
  std::string dir = image_dir;
  if (char* real = realpath(image_dir.c_str(), nullptr)) {
    dir = real;
    free(real);
  }
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  auto inside = [&](const std::string& path) {
    return path == dir || StartsWith(path, dir + "/");
  };
  RETURN_IF_ERROR(EnsureInitialized());
  ASSIGN_OR_RETURN(std::unique_ptr<FileLock> store_lock, LockStore());
  RETURN_IF_ERROR(CollectStoreGarbage());  // what is left in staging/ is in progress
  std::vector<std::string> users;
  ASSIGN_OR_RETURN(std::vector<std::string> names, env_->ListDir(WorkspacesDir()));
  std::sort(names.begin(), names.end());
  for (const std::string& n : names) {
    Result<WorkspaceConfig> c = ReadConfigAt(JoinPath(WorkspacesDir(), n));
    if (!c.ok()) {
      users.push_back(n + " (config unreadable)");  // cannot tell: assume it does
    } else if (inside(c->image.path)) {
      users.push_back(n);
    }
  }
  ASSIGN_OR_RETURN(std::vector<std::string> staged, env_->ListDir(StagingDir()));
  std::sort(staged.begin(), staged.end());
  for (const std::string& s : staged) {
    users.push_back(s.substr(0, s.rfind('.')) + " (being created)");  // its image is not known yet
  }
  if (users.empty()) RETURN_IF_ERROR(fn());
  return users;
}

}  // namespace cloister
