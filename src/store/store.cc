#include "store/store.h"

#include <openssl/rand.h>
#include <signal.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <map>
#include <set>

#include "base/agent_tools.h"
#include "base/pid_file.h"
#include "base/strings.h"
#include "store/image_ref.h"
#include "store/mac.h"
#include "store/retention.h"

namespace cloister {
namespace {

constexpr uint64_t kMinHomeSize = 64ull << 20;
constexpr uint64_t kMaxHomeSize = 16ull << 40;

std::string RandomHex(size_t bytes) {
  std::string raw(bytes, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(raw.data()), static_cast<int>(bytes)) != 1) {
    // RAND_bytes failing means no entropy source: names would collide, so fall back loudly.
    std::abort();
  }
  return HexEncode(raw);
}

Error NoSuchWorkspace(const std::string& name) {
  return Error(ErrorCode::kNotFound, "no workspace named '" + name + "'",
               "`cloister ls` lists workspaces; `cloister create " + name + "` makes one");
}

std::string StemOf(DiskKind kind) {
  return std::string(kind == DiskKind::kSystem ? layout::kSystemDiskStem : layout::kHomeImageStem);
}

// True if `name` (a workspace dir entry) is a live-disk file name: system.* or home.*.
bool IsDiskFileName(const std::string& name) {
  return StartsWith(name, std::string(layout::kSystemDiskStem) + ".") ||
         StartsWith(name, std::string(layout::kHomeImageStem) + ".");
}

std::set<std::string> ReferencedFiles(const WorkspaceConfig& c) {
  std::set<std::string> out;
  for (const DiskLayer& l : c.layers) out.insert(l.file);
  return out;
}

std::set<std::string> PinnedFiles(const WorkspaceConfig& c) {
  std::set<std::string> out;
  if (!c.system_top.empty()) out.insert(c.system_top);
  if (!c.home_top.empty()) out.insert(c.home_top);
  for (const CheckpointRecord& r : c.checkpoints) {
    if (!r.system.empty()) out.insert(r.system);
    if (!r.home.empty()) out.insert(r.home);
  }
  return out;
}

void EraseLayer(WorkspaceConfig& c, const std::string& file) {
  c.layers.erase(std::remove_if(c.layers.begin(), c.layers.end(),
                                [&](const DiskLayer& l) { return l.file == file; }),
                 c.layers.end());
}

DiskLayer* MutableLayer(WorkspaceConfig& c, const std::string& file) {
  for (DiskLayer& l : c.layers) {
    if (l.file == file) return &l;
  }
  return nullptr;
}

}  // namespace

std::string DefaultStoreRoot() {
  if (const char* h = std::getenv("CLOISTER_HOME"); h && *h) return h;
  if (const char* x = std::getenv("XDG_DATA_HOME"); x && *x) return std::string(x) + "/cloister";
  const char* home = std::getenv("HOME");
  return std::string(home && *home ? home : "/root") + "/.local/share/cloister";
}

// ---------------------------------------------------------------------------------------------
// Basics

Store::Store(std::string root, StoreOptions options)
    : root_(std::move(root)), options_(std::move(options)) {
  env_ = options_.env ? options_.env : Env::Default();
}

Result<std::unique_ptr<Store>> Store::Open(const std::string& root, StoreOptions options) {
  if (root.empty() || root[0] != '/') {
    return Error(ErrorCode::kInvalidArgument, "store root must be an absolute path: '" + root + "'",
                 "set CLOISTER_HOME or --store to an absolute path");
  }
  std::string r = root;
  while (r.size() > 1 && r.back() == '/') r.pop_back();
  return std::unique_ptr<Store>(new Store(r, std::move(options)));
}

int64_t Store::Now() const {
  if (options_.clock) return options_.clock();
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string Store::WorkspacesDir() const { return JoinPath(root_, layout::kWorkspacesDir); }
std::string Store::StagingDir() const { return JoinPath(root_, layout::kStagingDir); }
std::string Store::TrashDir() const { return JoinPath(root_, layout::kTrashDir); }
std::string Store::ImagesDir() const { return JoinPath(root_, layout::kImagesDir); }
std::string Store::MacRegistryPath() const { return JoinPath(root_, layout::kMacRegistryFile); }

WorkspacePaths Store::Paths(const std::string& name) const {
  WorkspacePaths p;
  p.dir = JoinPath(WorkspacesDir(), name);
  p.config = JoinPath(p.dir, layout::kConfigFile);
  p.lock = JoinPath(p.dir, layout::kLockFile);
  p.config_lock = JoinPath(p.dir, layout::kConfigLockFile);
  p.checkpoints_dir = JoinPath(p.dir, layout::kCheckpointsDir);
  p.ssh_dir = JoinPath(p.dir, layout::kSshDir);
  p.ssh_public_key = JoinPath(p.ssh_dir, layout::kSshPublicKeyFile);
  p.secrets = JoinPath(p.dir, layout::kSecretsFile);
  p.run_dir = JoinPath(p.dir, layout::kRunDir);
  p.supervisor_socket = JoinPath(p.run_dir, layout::kSupervisorSocket);
  p.supervisor_pid = JoinPath(p.run_dir, layout::kSupervisorPidFile);
  p.qmp_socket = JoinPath(p.run_dir, layout::kQmpSocket);
  p.channel_socket = JoinPath(p.run_dir, layout::kChannelSocket);
  p.console_log = JoinPath(p.dir, layout::kConsoleLog);
  p.supervisor_log = JoinPath(p.dir, layout::kSupervisorLogFile);
  p.suspend_state = JoinPath(p.dir, layout::kSuspendStateFile);
  p.meta_disk = JoinPath(p.run_dir, layout::kMetaDiskFile);
  p.trace_log = JoinPath(p.dir, layout::kTraceLogFile);
  return p;
}

LiveDisks Store::LiveDiskPaths(const std::string& name, const WorkspaceConfig& c) const {
  WorkspacePaths p = Paths(name);
  LiveDisks d;
  if (const DiskLayer* s = c.FindLayer(c.system_top)) {
    d.system = {JoinPath(p.dir, s->file), s->format, c.image.size};
  }
  if (const DiskLayer* h = c.FindLayer(c.home_top)) {
    d.home = {JoinPath(p.dir, h->file), h->format, c.home_size};
  }
  return d;
}

Status Store::EnsureInitialized() {
  RETURN_IF_ERROR(env_->CreateDirs(root_, 0700));
  std::string stamp = JoinPath(root_, layout::kLayoutVersionFile);
  ASSIGN_OR_RETURN(FileInfo info, env_->Stat(stamp));
  if (info.exists) {
    ASSIGN_OR_RETURN(std::string text, env_->ReadFile(stamp, 64));
    std::string t = Trim(text);
    if (t != std::to_string(layout::kLayoutVersion)) {
      return Error(ErrorCode::kFailedPrecondition,
                   "store " + root_ + " has layout version '" + t + "'; this cloister supports " +
                       std::to_string(layout::kLayoutVersion),
                   "use the cloister release that made this store, or another --store");
    }
  }
  for (std::string_view d : {layout::kWorkspacesDir, layout::kImagesDir, layout::kKeysDir,
                             layout::kStagingDir, layout::kTrashDir}) {
    RETURN_IF_ERROR(env_->CreateDirs(JoinPath(root_, d), 0700));
  }
  if (!info.exists) {
    RETURN_IF_ERROR(
        env_->AtomicWriteFile(stamp, std::to_string(layout::kLayoutVersion) + "\n"));
  }
  return OkStatus();
}

Result<std::unique_ptr<FileLock>> Store::LockStore() {
  return env_->LockFile(JoinPath(root_, layout::kStoreLockFile), /*wait=*/true);
}

Result<WorkspaceConfig> Store::ReadConfigAt(const std::string& dir) {
  ASSIGN_OR_RETURN(std::string text, env_->ReadFile(JoinPath(dir, layout::kConfigFile), 4 << 20));
  return ConfigFromJson(text);
}

Status Store::WriteConfigAt(const std::string& dir, const WorkspaceConfig& config) {
  return env_->AtomicWriteFile(JoinPath(dir, layout::kConfigFile),
                               ConfigToJson(config).dump(2) + "\n", 0600);
}

Result<WorkspaceConfig> Store::LoadConfig(const std::string& name) {
  RETURN_IF_ERROR(ValidateWorkspaceName(name));
  WorkspacePaths p = Paths(name);
  ASSIGN_OR_RETURN(FileInfo info, env_->Stat(p.dir));
  if (!info.is_dir) return NoSuchWorkspace(name);
  Result<WorkspaceConfig> c = ReadConfigAt(p.dir);
  if (!c.ok()) return c.error().WithContext("workspace " + name);
  return c;
}

Status Store::UpdateConfig(const std::string& name,
                           const std::function<Status(WorkspaceConfig&)>& mutate) {
  RETURN_IF_ERROR(ValidateWorkspaceName(name));
  WorkspacePaths p = Paths(name);
  if (!env_->Exists(p.config)) return NoSuchWorkspace(name);
  ASSIGN_OR_RETURN(std::unique_ptr<FileLock> lock, env_->LockFile(p.config_lock, /*wait=*/true));
  ASSIGN_OR_RETURN(WorkspaceConfig config, ReadConfigAt(p.dir));
  WorkspaceConfig before = config;
  RETURN_IF_ERROR(mutate(config));
  if (ConfigToJson(config) == ConfigToJson(before)) return OkStatus();
  return WriteConfigAt(p.dir, config);
}

Status Store::CommitDisks(const std::string& name,
                          const std::function<Status(WorkspaceConfig&)>& mutate) {
  return UpdateConfig(name, mutate);
}

Result<WorkspaceLock> Store::LockWorkspace(const std::string& name) {
  RETURN_IF_ERROR(ValidateWorkspaceName(name));
  WorkspacePaths p = Paths(name);
  ASSIGN_OR_RETURN(FileInfo info, env_->Stat(p.config));
  if (!info.exists) return NoSuchWorkspace(name);
  Result<std::unique_ptr<FileLock>> lock = env_->LockFile(p.lock, /*wait=*/false);
  if (!lock.ok()) {
    if (lock.error().code() == ErrorCode::kBusy) {
      return Error(ErrorCode::kBusy,
                   "workspace '" + name + "' is busy: another cloister command or its running "
                   "VM holds its lock",
                   "wait for it to finish, or stop the VM with `cloister stop " + name + "`");
    }
    if (lock.error().code() == ErrorCode::kNotFound) return NoSuchWorkspace(name);
    return lock.error();
  }
  // `rm` may have moved the directory away between the check and the lock.
  ASSIGN_OR_RETURN(FileInfo again, env_->Stat(p.config));
  if (!again.exists) return NoSuchWorkspace(name);
  return WorkspaceLock(name, std::move(lock).value());
}

lifecycle::State Store::State(const std::string& name) {
  // The supervisor holds an OFD lock on its pid file for its whole life (base/pid_file.h, the same
  // tier vm::DeriveStatus starts from): a pid recycled by an unrelated process never reads as live.
  WorkspacePaths p = Paths(name);
  struct stat st;
  bool suspended = ::stat(p.suspend_state.c_str(), &st) == 0;
  return lifecycle::FromPidFile(ReadPidFile(p.supervisor_pid), suspended);
}

Status Store::RequireStopped(const std::string& name, lifecycle::Action action) {
  return lifecycle::Check(State(name), action, name);
}

Status Store::CheckNotCompromised(const WorkspaceConfig& config) {
  if (!config.compromised) return OkStatus();
  return Error(ErrorCode::kCompromised,
               "workspace '" + config.name + "' is marked compromised (" +
                   config.compromised_reason + ") and will not start",
               "wipe its disk and home: `cloister wipe " + config.name +
                   "` (settings, credentials and SSH keys are kept)");
}

Status Store::MarkCompromised(const std::string& name, const std::string& reason) {
  int64_t now = Now();
  return UpdateConfig(name, [&](WorkspaceConfig& c) {
    if (c.compromised) return OkStatus();
    c.compromised = true;
    c.compromised_reason = reason.empty() ? "unspecified" : reason.substr(0, 1024);
    c.compromised_at = now;
    return OkStatus();
  });
}

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

Result<std::vector<WorkspaceSummary>> Store::List() {
  std::vector<WorkspaceSummary> out;
  ASSIGN_OR_RETURN(FileInfo info, env_->Stat(WorkspacesDir()));
  if (!info.is_dir) return out;
  ASSIGN_OR_RETURN(std::vector<std::string> names, env_->ListDir(WorkspacesDir()));
  for (const std::string& n : names) {
    WorkspaceSummary s;
    s.name = n;
    if (!ValidateWorkspaceName(n).ok()) {
      s.problem = "not a workspace (invalid name)";
      out.push_back(s);
      continue;
    }
    Result<WorkspaceConfig> c = ReadConfigAt(Paths(n).dir);
    if (c.ok()) {
      s.config = *c;
      for (const DiskLayer& l : c->layers) {
        Result<FileInfo> fi = env_->Stat(JoinPath(Paths(n).dir, l.file));
        if (!fi.ok() || !fi->exists) {
          s.problem = "disk layer " + l.file + " is missing";
          continue;
        }
        s.total_allocated += fi->allocated;
      }
    } else {
      s.problem = c.error().message();
    }
    s.state = State(n);
    out.push_back(s);
  }
  return out;
}

Result<WorkspaceInfo> Store::Describe(const std::string& name) {
  WorkspaceInfo info;
  ASSIGN_OR_RETURN(info.config, LoadConfig(name));
  info.paths = Paths(name);
  info.state = State(name);
  const WorkspaceConfig& c = info.config;
  std::map<std::string, std::string> roles;
  if (!c.system_top.empty()) roles[c.system_top] = "live";
  if (!c.home_top.empty()) roles[c.home_top] = "live";
  for (const CheckpointRecord& r : c.checkpoints) {
    if (!r.system.empty()) roles[r.system] = "checkpoint " + r.id;
    if (!r.home.empty()) roles[r.home] = "checkpoint " + r.id;
  }
  std::map<std::string, uint64_t> allocated;
  for (const DiskLayer& l : c.layers) {
    LayerUsage u;
    u.layer = l;
    u.role = roles.count(l.file) ? roles[l.file] : "internal";
    ASSIGN_OR_RETURN(FileInfo fi, env_->Stat(JoinPath(info.paths.dir, l.file)));
    if (!fi.exists) {
      return Error(ErrorCode::kCorrupt, "workspace " + name + ": disk layer " + l.file +
                                            " is missing",
                   "`cloister wipe " + name + "` makes fresh disks");
    }
    u.apparent = fi.apparent;
    u.allocated = fi.allocated;
    allocated[l.file] = fi.allocated;
    info.layers.push_back(u);
  }
  for (const CheckpointRecord& r : c.checkpoints) {
    CheckpointInfo ci;
    ci.record = r;
    ci.allocated = allocated[r.system] + allocated[r.home];
    info.checkpoints.push_back(ci);
  }
  // Walk the directory: every file, hard links once.
  std::set<std::pair<uint64_t, uint64_t>> seen;
  std::function<Status(const std::string&)> walk = [&](const std::string& dir) -> Status {
    ASSIGN_OR_RETURN(std::vector<std::string> names, env_->ListDir(dir));
    for (const std::string& n : names) {
      std::string path = JoinPath(dir, n);
      ASSIGN_OR_RETURN(FileInfo fi, env_->Stat(path));
      if (fi.is_dir) {
        RETURN_IF_ERROR(walk(path));
      } else if (seen.insert({fi.device, fi.inode}).second) {
        info.total_apparent += fi.apparent;
        info.total_allocated += fi.allocated;
      }
    }
    return OkStatus();
  };
  RETURN_IF_ERROR(walk(info.paths.dir));
  return info;
}

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

// ---------------------------------------------------------------------------------------------
// Start

Result<LiveDisks> Store::EnsureSystemDisk(const WorkspaceLock& lock) {
  const std::string& name = lock.name();
  ASSIGN_OR_RETURN(WorkspaceConfig c, LoadConfig(name));
  RETURN_IF_ERROR(CheckNotCompromised(c));
  RETURN_IF_ERROR(CheckBaseUnchanged(env_, c.image));
  RETURN_IF_ERROR(CollectGarbage(name));
  RETURN_IF_ERROR(Compact(name, /*may_rewrite_live_tops=*/true));
  ASSIGN_OR_RETURN(c, LoadConfig(name));
  if (c.system_top.empty()) {
    WorkspacePaths p = Paths(name);
    uint64_t gen = c.next_generation;
    std::string stem = JoinPath(p.dir, std::string(layout::kSystemDiskStem) + "." +
                                           std::to_string(gen));
    for (layout::DiskFormat f : {layout::DiskFormat::kRaw, layout::DiskFormat::kQcow2}) {
      RETURN_IF_ERROR(env_->RemoveFile(stem + std::string(layout::DiskExtension(f))));
    }
    ASSIGN_OR_RETURN(layout::DiskFormat fmt, CloneSystemDisk(env_, c.image.path, c.image.size,
                                                             stem, options_.system_disk_mode));
    RETURN_IF_ERROR(CommitDisks(name, [&](WorkspaceConfig& cfg) {
      DiskLayer l;
      l.file = layout::LiveDiskFileName(layout::kSystemDiskStem, gen, fmt);
      l.disk = DiskKind::kSystem;
      l.format = fmt;
      l.on_base = fmt == layout::DiskFormat::kQcow2;
      cfg.layers.push_back(l);
      cfg.system_top = l.file;
      cfg.next_generation = gen + 1;
      return OkStatus();
    }));
    ASSIGN_OR_RETURN(c, LoadConfig(name));
  }
  return LiveDiskPaths(name, c);
}

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
