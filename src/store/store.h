// Store: the workspace store rooted at $CLOISTER_HOME (see layout.h and docs/layout.md).
//
// A workspace is one directory, workspaces/NAME/, whose config.json names every disk layer it
// owns. Every verb follows one discipline, so that a crash (kill -9) at any step leaves a state
// that `List` reports truthfully and that re-running the verb completes:
//   1. take the workspace lock (non-blocking: a second mutation is kBusy);
//   2. delete leftovers of an interrupted verb (files config.json does not name);
//   3. create new files under new names (nothing the config names is modified in place);
//   4. commit: one atomic config.json write (temp, fsync, rename) or one directory rename;
//   5. delete what the commit made unreferenced.
// `create` builds the workspace in staging/ and renames it into workspaces/ (the commit); `rm`
// renames it into trash/ (the commit), releases its MAC, then deletes it.
//
// Disk chains. The live system disk is a reflink clone of the base image (system.G.img) or a
// qcow2 overlay over it (system.G.qcow2); the live home is a raw sparse ext4 image (home.G.img)
// or a qcow2 overlay over a checkpoint's layer (home.G.qcow2). A checkpoint freezes both live
// tops as checkpoints/ID/{system,home}.{img,qcow2} (hard links, so it works on files a running
// QEMU holds open) and puts fresh qcow2 overlays on top: exactly what QMP blockdev-snapshot does
// for a running VM. Layers of removed checkpoints are merged into their children (qemu-img rebase,
// cost proportional to the layer's data) or deleted.
//
// Thread-safety: a Store object is not thread-safe; use one per thread. Between processes, all
// synchronisation is by flock(2): the workspace lock (mutations), the config lock (each config
// read-modify-write) and the store lock (MAC registry, staging/trash, workspace dir renames).
// Lock order: workspace lock, then config lock, then store lock.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/result.h"
#include "lifecycle/lifecycle.h"
#include "store/config.h"
#include "store/disks.h"
#include "store/env.h"
#include "store/layout.h"

namespace cloister {

struct StoreOptions {
  Env* env = nullptr;                  // nullptr: Env::Default()
  std::function<int64_t()> clock;      // unix seconds; empty: the system clock
  SystemDiskMode system_disk_mode = SystemDiskMode::kAuto;
  uint64_t min_free_bytes = 256ull << 20;  // `create` refuses below this much free space
  // Makes a fresh workspace SSH key: called by Create (with the staging directory, before the
  // commit rename) and by WipeHome and Wipe (workspace lock held, with the live directory). The
  // implementation (sshagent, installed by the CLI in OpenStore) stores the private seed
  // encrypted in <dir>/secrets.enc (vault) and writes only the PUBLIC key to
  // <dir>/ssh/id_ed25519.pub. Empty: no key is made.
  std::function<Status(const std::string& name, const std::string& workspace_dir)> make_ssh_key;
  // Makes a fresh host key for the guest's sshd (IDE access, sshagent/ide_keys.h): called by
  // Create (staging directory, before the commit) and by Wipe (workspace lock held), never by
  // WipeHome. Writes <dir>/ssh/sshd_host_ed25519_key{,.pub}. Empty: no key is made (the
  // supervisor then makes one at the first boot).
  std::function<Status(const std::string& name, const std::string& workspace_dir)>
      make_sshd_host_key;
  // Destroys the browser VM's kept profile, disk and key (browser/profile_disk.h): called by
  // WipeHome and Wipe (workspace lock held, after their commit), never by Reset. Remove needs no
  // hook: the disk file and the secrets file holding the key go with the directory. Empty: the
  // profile file alone is deleted (its key, if any, stays in the secrets file, useless without it).
  std::function<Status(const std::string& name, const std::string& workspace_dir)>
      destroy_browser_profile;
  // Turns CreateRequest::image into what the system disk is cloned from. Called by Create under
  // the store lock. Empty: ResolveImage (image_ref.h: a raw image path only). The CLI installs
  // cli::CatalogImageResolver (cli/image_resolver.h): "" means the default image, a name is
  // looked up in the verified catalogs, a path containing '/' is a raw image.
  std::function<Result<ImageIdentity>(const std::string& spec)> resolve_image;
  // `fork --with-credentials`: re-encrypts the source's credentials into the fork's secrets file
  // (the vault binds a secrets file to its workspace's name, so a copied file would not open):
  // called by Fork with the staging directory, after make_ssh_key wrote the fork's own key there.
  // SECURITY: it must copy no subscription login (a login lives in one workspace) and no blob
  // (the SSH key and the browser profile's key are the source's). Empty: --with-credentials is
  // refused.
  std::function<Status(const std::string& source_name, const std::string& source_dir,
                       const std::string& name, const std::string& dir)>
      copy_credentials;
};

// $CLOISTER_HOME, else $XDG_DATA_HOME/cloister, else $HOME/.local/share/cloister.
std::string DefaultStoreRoot();

// Every path of a workspace (absolute). Files of later modules are here so that nobody spells a
// name twice; most do not exist until their module writes them.
struct WorkspacePaths {
  std::string dir;
  std::string config;
  std::string lock;
  std::string config_lock;
  std::string checkpoints_dir;
  std::string ssh_dir;
  std::string ssh_public_key;
  std::string secrets;
  std::string run_dir;
  std::string supervisor_socket;
  std::string supervisor_pid;
  std::string qmp_socket;
  std::string channel_socket;
  std::string console_log;
  std::string supervisor_log;
  std::string suspend_state;
  std::string meta_disk;
  std::string trace_log;
};

// A workspace's state is lifecycle::State (lifecycle/lifecycle.h), derived, never stored (lima's
// rule). The store derives only its pid-file tier (Store::State): kStopped, kSuspended, kBroken
// (a pid file nobody holds), or kRunning for any live supervisor.

struct LiveDisk {
  std::string path;  // absolute
  layout::DiskFormat format = layout::DiskFormat::kRaw;
  uint64_t virtual_size = 0;  // what the guest sees
};
// What the VM attaches: vda = system, vdb = home.
struct LiveDisks {
  LiveDisk system;
  LiveDisk home;
};

struct LayerUsage {
  DiskLayer layer;
  std::string role;  // "live", "checkpoint ID", "internal"
  uint64_t apparent = 0;
  uint64_t allocated = 0;
};

struct CheckpointInfo {
  CheckpointRecord record;
  uint64_t allocated = 0;  // bytes of its own layers
};

struct WorkspaceInfo {
  WorkspaceConfig config;
  WorkspacePaths paths;
  lifecycle::State state = lifecycle::State::kStopped;
  std::vector<LayerUsage> layers;
  std::vector<CheckpointInfo> checkpoints;
  uint64_t total_apparent = 0;   // every file of the workspace directory
  uint64_t total_allocated = 0;  // hard links counted once
};

// One row of `ls`. A workspace whose config cannot be read is listed with `problem` set.
struct WorkspaceSummary {
  std::string name;
  std::optional<WorkspaceConfig> config;
  std::string problem;
  lifecycle::State state = lifecycle::State::kStopped;
  uint64_t total_allocated = 0;
};

struct CreateRequest {
  std::string name;
  std::string image;  // see ResolveImage (image_ref.h)
  uint32_t memory_mib = kDefaultMemoryMib;
  uint32_t cpus = kDefaultCpus;
  uint64_t home_size = kDefaultHomeSize;
  std::vector<Volume> volumes;
  std::string tool = "shell";  // base/agent_tools.h; checked by Create
};

// `fork`: a new workspace whose system disk and home start as the source's are (store_fork.cc).
struct ForkRequest {
  std::string source;
  std::string name;
  bool with_credentials = false;  // StoreOptions::copy_credentials; never a subscription login
  // Top-level config keys (other modules' sections) not carried over: published ports would
  // collide with the source's, `run --rm`'s mark is the source's.
  std::vector<std::string> drop_settings;
  // Fork this checkpoint of the source instead of its live disks: how a RUNNING source is forked
  // (its supervisor took the checkpoint over QMP and holds the workspace lock; the copy checks
  // afterwards that the checkpoint's files did not change meanwhile). Empty: the live disks of a
  // stopped source, under its lock.
  std::string checkpoint;
  // Bytes copied so far of `total` (sum of the allocated bytes of the layers copied).
  std::function<void(uint64_t done, uint64_t total)> progress;
};

struct ForkResult {
  WorkspaceConfig config;
  uint64_t copied_bytes = 0;  // allocated bytes of the layers copied
  bool reflinked = true;      // every layer was a reflink (FICLONE) clone
};

// Proof of holding a workspace's lock; released when destroyed.
class WorkspaceLock {
 public:
  WorkspaceLock(std::string name, std::unique_ptr<FileLock> lock)
      : name_(std::move(name)), lock_(std::move(lock)) {}
  const std::string& name() const { return name_; }

 private:
  std::string name_;
  std::unique_ptr<FileLock> lock_;
};

// A checkpoint between PrepareCheckpoint and CommitCheckpoint (see there).
struct PreparedCheckpoint {
  struct Disk {
    DiskKind disk = DiskKind::kSystem;
    std::string old_top;        // live layer file now (relative)
    std::string layer;          // checkpoints/ID/<stem>.<ext>: hard link of old_top (relative)
    std::string new_top;        // fresh qcow2 overlay over `layer` (relative)
    std::string new_top_path;   // absolute path of new_top: the live snapshot's overlay file
    std::string layer_path;     // absolute path of `layer`: the overlay's backing file name
    layout::DiskFormat layer_format = layout::DiskFormat::kRaw;
  };
  std::string name;
  std::string id;
  int64_t created = 0;
  bool automatic = false;
  std::vector<Disk> disks;  // system (absent if the system disk is absent), then home
  uint64_t next_generation = 0;
};

struct CheckpointOptions {
  bool automatic = false;  // a proven-boot checkpoint: retention applies (manual ones are kept)
};

class Store {
 public:
  // Opening reads nothing and writes nothing; the first mutating verb creates the root, its
  // directories and the layout stamp.
  static Result<std::unique_ptr<Store>> Open(const std::string& root, StoreOptions options = {});

  const std::string& root() const { return root_; }
  Env* env() const { return env_; }
  WorkspacePaths Paths(const std::string& name) const;
  // Absolute paths of the live disks (system empty if absent, after reset/wipe).
  LiveDisks LiveDiskPaths(const std::string& name, const WorkspaceConfig& config) const;

  // ---- Verbs (each takes the workspace lock itself) ----
  Result<WorkspaceConfig> Create(const CreateRequest& request);
  // A new workspace with copies of the source's disk chains (reflink, else sparse copies; every
  // qcow2 backing name points into the fork's own directory or at the public base image, so
  // removing the source never breaks it) and a new identity: id, MAC, SSH key, sshd host key;
  // no checkpoints, no saved RAM (it boots fresh), no credentials unless asked (never a
  // subscription login), settings copied but ForkRequest::drop_settings. A compromised source is
  // refused. Built in staging/ and renamed into place, as Create.
  Result<ForkResult> Fork(const ForkRequest& request);
  Result<std::vector<WorkspaceSummary>> List();
  Result<WorkspaceInfo> Describe(const std::string& name);
  // Drops the live system disk; the next EnsureSystemDisk clones the base again. Home,
  // checkpoints, settings, secrets and keys stay.
  Status Reset(const std::string& name);
  // A fresh empty home image and a new workspace keypair (StoreOptions::make_ssh_key). Every checkpoint goes too (each holds a
  // copy of the old home). The system disk, settings and secrets stay.
  Status WipeHome(const std::string& name);
  // System disk and home together, every checkpoint, and the compromised flag; then a new
  // workspace keypair (StoreOptions::make_ssh_key). Settings, secrets and volumes (host folders
  // are never touched) stay.
  Status Wipe(const std::string& name);
  // Deletes the whole workspace directory and releases its MAC. Re-running after a crash
  // finishes the deletion.
  Status Remove(const std::string& name);

  Result<std::vector<CheckpointInfo>> ListCheckpoints(const std::string& name);
  // Offline checkpoint of a stopped workspace (PrepareCheckpoint + CommitCheckpoint, then
  // retention if automatic).
  Result<CheckpointRecord> CreateCheckpoint(const std::string& name, CheckpointOptions options = {});
  // New live tops over the checkpoint's layers (system absent if it was absent then).
  Status RestoreCheckpoint(const std::string& name, const std::string& id);
  Status RemoveCheckpoint(const std::string& name, const std::string& id);
  // Prunes automatic checkpoints by tiered retention (retention.h); returns the removed ids.
  Result<std::vector<std::string>> ApplyRetention(const std::string& name);

  // ---- For other modules ----
  // The workspace lock. kNotFound for an unknown workspace, kBusy when held.
  Result<WorkspaceLock> LockWorkspace(const std::string& name);
  Result<WorkspaceConfig> LoadConfig(const std::string& name);
  // The workspace's QEMU id, unique within the store (store/mac.h; the uid QEMU runs under as root
  // is vm::kQemuIdBase plus it). Takes the store lock only when an older registry needs its ids.
  Result<uint32_t> QemuId(const std::string& name);
  // Read-modify-write of config.json under the config lock (waits for it; held briefly). The
  // caller should hold the workspace lock unless the change is a flag (like MarkCompromised).
  // `mutate` must not change disks, layers or checkpoints.
  Status UpdateConfig(const std::string& name,
                      const std::function<Status(WorkspaceConfig&)>& mutate);
  // The proxy's call when a placeholder heads to a host it does not belong to. Does not need the
  // workspace lock (the VM's supervisor holds it); idempotent (the first reason is kept).
  Status MarkCompromised(const std::string& name, const std::string& reason);
  // `image rm`: under the store lock, lists every workspace whose base image (config image.path)
  // lies in directory `image_dir`, plus every workspace being created (its image is not known
  // yet) and any whose config cannot be read; if there is none, runs `fn` before releasing the
  // lock, so no `create` can pick the image meanwhile. Returns the users ("NAME", "NAME (being
  // created)", "NAME (config unreadable)"); empty means `fn` ran and succeeded.
  Result<std::vector<std::string>> IfImageUnused(const std::string& image_dir,
                                                 const std::function<Status()>& fn);
  // kCompromised (hint: `cloister wipe NAME`) if the workspace is flagged.
  static Status CheckNotCompromised(const WorkspaceConfig& config);
  // The pid-file tier of the lifecycle state (lifecycle::FromPidFile); vm::DeriveStatus refines a
  // live one with the supervisor's answer.
  lifecycle::State State(const std::string& name);

  // Called by `start` with the workspace lock held, before QEMU runs: refuses a compromised
  // workspace, checks the base image is unchanged, cleans leftovers, merges layers of removed
  // checkpoints, clones the system disk if absent, and returns the disks to attach.
  Result<LiveDisks> EnsureSystemDisk(const WorkspaceLock& lock);

  // Live checkpoint of a RUNNING VM (the VM module's proven-boot checkpoint), with the workspace
  // lock held throughout:
  //   1. PrepareCheckpoint: hard-links each live top to checkpoints/ID/ and creates a fresh qcow2
  //      overlay over it (PreparedCheckpoint::Disk::new_top_path, backing file name =
  //      layer_path, created with -u so QEMU's lock on the live file does not matter).
  //   2. The caller switches QEMU to the overlays: for each disk, QMP blockdev-add of new_top_path
  //      (driver qcow2, "backing": null) then blockdev-snapshot {node: <disk's node>, overlay:
  //      <new node>}. Writes now go to the overlay; the old top is frozen.
  //   3. CommitCheckpoint: one atomic config write records the checkpoint and the new live tops;
  //      the old names in the workspace dir are unlinked (the inodes live on under checkpoints/).
  //   On failure before 3, call AbortCheckpoint (or leave it: the next verb deletes the files).
  //   If QEMU had switched (2) and 3 never happens, the VM's writes after the switch are lost at
  //   the next start; the disks stay consistent (the old tops were not written after the switch).
  // Retention after a live commit (vm_running) removes checkpoint records and deletes layers
  // nothing reads through, but rewrites no layer (QEMU has the chains open); merges wait for the
  // next EnsureSystemDisk.
  Result<PreparedCheckpoint> PrepareCheckpoint(const WorkspaceLock& lock,
                                               CheckpointOptions options = {});
  Result<CheckpointRecord> CommitCheckpoint(const WorkspaceLock& lock,
                                            const PreparedCheckpoint& prepared,
                                            bool vm_running = true);
  Status AbortCheckpoint(const WorkspaceLock& lock, const PreparedCheckpoint& prepared);

 private:
  Store(std::string root, StoreOptions options);

  int64_t Now() const;
  std::string WorkspacesDir() const;
  std::string StagingDir() const;
  std::string TrashDir() const;
  std::string MacRegistryPath() const;
  std::string ImagesDir() const;
  Status EnsureInitialized();
  Result<std::unique_ptr<FileLock>> LockStore();
  Result<WorkspaceConfig> ReadConfigAt(const std::string& dir);
  Status WriteConfigAt(const std::string& dir, const WorkspaceConfig& config);
  // UpdateConfig for disk/layer changes (the workspace lock is held by the caller).
  Status CommitDisks(const std::string& name,
                     const std::function<Status(WorkspaceConfig&)>& mutate);
  // The lifecycle table's precondition for a disk verb (refused while a supervisor is live).
  Status RequireStopped(const std::string& name, lifecycle::Action action);
  Status CollectGarbage(const std::string& name);
  Status CollectStoreGarbage();  // store lock held
  Status FinishTrashEntry(const std::string& entry);  // store lock held
  Status Compact(const std::string& name, bool may_rewrite_live_tops);
  Result<std::string> NewHomeImage(const std::string& dir, const WorkspaceConfig& config,
                                   uint64_t generation);
  Status MakeSshKey(const std::string& name, const std::string& dir);
  Status MakeSshdHostKey(const std::string& name, const std::string& dir);
  // Fork's copy of one disk chain into `staging` (store_fork.cc).
  struct ForkCopy;
  Status CopyChainForFork(const WorkspaceConfig& source, const std::string& top, DiskKind kind,
                          const std::string& staging, const std::string& final_dir,
                          ForkCopy& copy, WorkspaceConfig& fork);
  Status DestroyBrowserProfile(const std::string& name, const std::string& dir);
  // WipeHome and Wipe: `drop` takes layers out of the config (naming them in `dropped`) in the
  // one commit that installs a fresh empty home (store.cc).
  Status ReplaceHome(const std::string& name, lifecycle::Action action, bool compact,
                     const std::function<void(WorkspaceConfig&, std::vector<std::string>* dropped)>&
                         drop);
  Status RemoveUnreferenced(const std::string& name, const std::vector<std::string>& files);
  Result<CheckpointRecord> CommitCheckpointLocked(const std::string& name,
                                                  const PreparedCheckpoint& prepared,
                                                  bool may_rewrite_live_tops);
  Result<std::vector<std::string>> ApplyRetentionLocked(const std::string& name,
                                                        bool may_rewrite_live_tops);
  Status RemoveCheckpointLocked(const std::string& name, const std::string& id,
                                bool may_rewrite_live_tops);

  std::string root_;
  StoreOptions options_;
  Env* env_;
};

}  // namespace cloister
