// The store's core: the root, its stamp and locks, configs, state, `ls`/`describe` and the
// start's disks. Its verbs live beside it: store_create.cc, store_dispose.cc, store_gc.cc,
// store_checkpoints.cc.
#include "store/store.h"

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
#include "store/store_internal.h"

namespace cloister {

using store_internal::NoSuchWorkspace;

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

}  // namespace cloister
