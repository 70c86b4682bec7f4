// Every file name of the store and of a workspace directory, in one place (as lima's
// pkg/store/filenames). docs/layout.md documents each one: what writes it and what deletes it.
// Add a constant here (with a comment) before writing a new file anywhere under the store root;
// never spell a store file name as a literal elsewhere.
//
// Store root: $CLOISTER_HOME, else $XDG_DATA_HOME/cloister, else ~/.local/share/cloister.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "catalog/names.h"  // the catalog's names: the catalog sits below the store

namespace cloister::layout {

// ---- Store level (directly under the store root) ----

// Layout version stamp: one decimal line. Written once by the first mutating verb; a store whose
// stamp is newer than kLayoutVersion is refused (never silently rewritten).
inline constexpr std::string_view kLayoutVersionFile = "layout-version";
inline constexpr int kLayoutVersion = 1;
// One directory per workspace: workspaces/NAME/ (see "Workspace directory" below).
inline constexpr std::string_view kWorkspacesDir = "workspaces";
// Base images and their metadata (catalog engineer). The store keeps its SHA-256 cache here.
inline constexpr std::string_view kImagesDir = catalog::names::kImagesDir;
// SHA-256 cache of raw base images named by path (keyed by path, size, mtime, inode), so hashing a
// base image is a one-time cost and `create` stays O(1) in the base size. Under kImagesDir.
inline constexpr std::string_view kImageHashCacheFile = "sha256-cache.json";
// Store-wide keys (catalog keyring, vault master key...), owned by those modules.
inline constexpr std::string_view kKeysDir = catalog::names::kKeysDir;
// Store-wide MAC registry (JSON): which workspace holds which MAC. Rewritten atomically under
// kStoreLockFile.
inline constexpr std::string_view kMacRegistryFile = "macs.json";
// flock(2) target serialising store-wide changes (MAC registry, workspace dir renames, GC).
inline constexpr std::string_view kStoreLockFile = "store.lock";
// Workspaces being created: staging/NAME.NONCE/ is built completely, then renamed into
// workspaces/NAME (the commit point of `create`). A staging dir whose lock is free is garbage.
inline constexpr std::string_view kStagingDir = "staging";
// Workspaces being deleted: `rm` renames workspaces/NAME to trash/ID (the commit point), releases
// its MAC, then deletes the directory. Anything in trash/ is garbage to finish deleting.
inline constexpr std::string_view kTrashDir = "trash";

// ---- Images, catalogs and their keys (catalog/ and image/ modules) ----
// Defined in catalog/names.h (the catalog does not include the store) and aliased here.
// docs/layout.md "Images and their caches" says what writes and deletes each of these.

// images/<name>/: one directory per image of a verified catalog, holding its artifacts, named the
// same in every image and every catalog (the catalog lists each with its size and SHA-256).
inline constexpr std::string_view kImageDiskFile = catalog::names::kDiskFile;      // raw ext4, no partition table
inline constexpr std::string_view kImageKernelFile = catalog::names::kKernelFile;     // for direct kernel boot
inline constexpr std::string_view kImageInitrdFile = catalog::names::kInitrdFile;  // mounts /dev/vda
// images/<name>/verified.json: per artifact, the SHA-256 last computed from its bytes and the
// file's identity then (device, inode, size, mtime, ctime). `create` re-hashes an artifact only
// if that identity changed (any write changes ctime, which userspace cannot set back), so
// creating a workspace stays O(1) in the image size while tampered bytes are still caught.
// Written by `image build`/`import`/`verify` and by a `create` that had to re-hash.
inline constexpr std::string_view kImageVerifiedFile = catalog::names::kVerifiedFile;
// Prefixes of in-progress directories under kImagesDir: .build-<name> and .work-<name> (image
// build), .import-<name> (import staging), .rm-<name> (image rm). Moved into place or deleted.
inline constexpr std::string_view kImageBuildPrefix = catalog::names::kBuildPrefix;
inline constexpr std::string_view kImageWorkPrefix = catalog::names::kWorkPrefix;
inline constexpr std::string_view kImageImportPrefix = catalog::names::kImportPrefix;
inline constexpr std::string_view kImageRemovePrefix = catalog::names::kRemovePrefix;
// catalogs/<channel>/{catalog.json,catalog.json.sig}: the adopted (verified) catalog of a channel.
inline constexpr std::string_view kCatalogsDir = catalog::names::kCatalogsDir;
inline constexpr std::string_view kCatalogFile = catalog::names::kCatalogFile;
inline constexpr std::string_view kCatalogSignatureFile = catalog::names::kSignatureFile;
// catalogs/.staging-<channel>/: a catalog being adopted (exchanged into place atomically).
inline constexpr std::string_view kCatalogStagingPrefix = catalog::names::kCatalogStagingPrefix;
// flock(2) target for catalog mutations: catalogs/.lock (and keys/.lock for the keyring). Lock
// order: the store lock (kStoreLockFile) before this one.
inline constexpr std::string_view kCatalogLockFile = catalog::names::kLockFile;
// keys/keyring.json: trusted publisher keys. keys/publisher.key (0600) and publisher.pub: this
// host's catalog signing key (never leaves the host).
inline constexpr std::string_view kKeyringFile = catalog::names::kKeyringFile;
inline constexpr std::string_view kPublisherKeyFile = catalog::names::kPublisherKeyFile;
inline constexpr std::string_view kPublisherPubFile = catalog::names::kPublisherPubFile;
// cache/debs/: Debian packages downloaded for image builds (reused by later builds).
inline constexpr std::string_view kDebCacheDir = catalog::names::kDebCacheDir;
// cache/pvh/<sha256 of a vmlinuz>.vmlinux: the uncompressed kernel for PVH boot, derived from an
// image's vmlinuz by the supervisor at the first boot (vm/pvh_kernel.h). Garbage once no image
// has that vmlinuz; safe to delete at any time (derived again).
inline constexpr std::string_view kPvhCacheDir = "cache/pvh";

// ---- Workspace directory: workspaces/NAME/ ----

// The workspace's config (JSON; WorkspaceConfig in store/config.h). Rewritten atomically (temp,
// fsync, rename) under kConfigLockFile. It names every disk layer the workspace owns.
inline constexpr std::string_view kConfigFile = "config.json";
// flock(2) target: the workspace lock, held exclusively by every mutating verb (and by a running
// VM's supervisor for the VM's lifetime). Taken without waiting: a second mutation is "busy".
inline constexpr std::string_view kLockFile = "lock";
// flock(2) target held briefly around each read-modify-write of kConfigFile, so that callers that
// do not hold the workspace lock (MarkCompromised from the proxy) can still update it safely.
inline constexpr std::string_view kConfigLockFile = "config.lock";
// Suffix of atomic-write temp files (kConfigFile + kTempSuffix...). Leftovers are garbage.
inline constexpr std::string_view kTempSuffix = ".tmp";

// Live disk layers. The live system disk and home image are named by generation so that a new
// layer can be created beside the old one and switched to by one atomic config write:
//   system.GEN.img    raw reflink (FICLONE) clone of the base image
//   system.GEN.qcow2  qcow2 overlay (backing: base image, or a checkpoint layer)
//   home.GEN.img      raw sparse ext4 home image (mkfs.ext4)
//   home.GEN.qcow2    qcow2 overlay over a checkpoint layer
// config.json says which file is live; any other system.* / home.* file is garbage.
inline constexpr std::string_view kSystemDiskStem = "system";
inline constexpr std::string_view kHomeImageStem = "home";
inline constexpr std::string_view kRawExtension = ".img";
inline constexpr std::string_view kQcow2Extension = ".qcow2";

// Checkpoints: checkpoints/ID/ holds the frozen layers of one checkpoint, hard links of what were
// the live tops when it was taken: system.img|system.qcow2 and home.img|home.qcow2 (the same stems
// and extensions as above, without a generation). A layer of a removed checkpoint that still backs
// another layer stays (recorded in config.json as an internal layer) until it can be merged.
inline constexpr std::string_view kCheckpointsDir = "checkpoints";

// Host-side SSH material of the workspace (mode 0700). Only the PUBLIC key is a file here: the
// private key lives only in the encrypted secrets file (sshagent + vault). Written by the
// StoreOptions::make_ssh_key hook at `create`, `wipe-home` and `wipe`; deleted by `rm`.
inline constexpr std::string_view kSshDir = "ssh";
inline constexpr std::string_view kSshPublicKeyFile = "id_ed25519.pub";   // under kSshDir

// The workspace's encrypted secrets file (vault). Kept by reset/wipe-home/wipe, deleted by rm.
inline constexpr std::string_view kSecretsFile = "secrets.enc";

// The browser VM's kept profile (browser/profile_disk.h, `browser start --keep-profile`): a qcow2
// encrypted by QEMU's LUKS, its key a blob in kSecretsFile. Creation temporaries are this name
// plus ".tmp-raw" / ".tmp-qcow2". Deleted (with the key) by wipe-home, wipe, rm and
// `browser NAME forget`; kept by reset.
inline constexpr std::string_view kBrowserProfileFile = "browser-profile.qcow2";

// Run directory (mode 0700) for the running VM's sockets and pid files (vm module). Deleted by rm.
inline constexpr std::string_view kRunDir = "run";
inline constexpr std::string_view kSupervisorSocket = "supervisor.sock";  // under kRunDir
inline constexpr std::string_view kSupervisorPidFile = "supervisor.pid";  // under kRunDir
inline constexpr std::string_view kQmpSocket = "qmp.sock";                // under kRunDir
inline constexpr std::string_view kChannelSocket = "channel.sock";        // under kRunDir
// Per-boot metadata disk (vdc, ext4, label CLOISTER-META), rebuilt at each start (vm module).
inline constexpr std::string_view kMetaDiskFile = "meta.img";             // under kRunDir

// Serial console log of the last boot (vm module; truncated at each boot).
inline constexpr std::string_view kConsoleLog = "console.log";
// The supervisor's own log (vm module), beside console.log so it survives a failed boot.
inline constexpr std::string_view kSupervisorLogFile = "supervisor.log";
// Saved VM state for suspend/resume (vm module). It refers to the disks' contents, so reset,
// wipe-home, wipe and checkpoint restore delete it (before their commit).
inline constexpr std::string_view kSuspendStateFile = "suspend.state";
// Beside it: how that boot entered its kernel ("pvh" or "bzimage"), since QEMU can only load the
// state into a VM started the same way (the option ROMs differ). Written before the state, deleted
// with it; a state without it was saved by a bzImage boot.
inline constexpr std::string_view kSuspendKernelFile = "suspend.kernel";
// Egress trace log, one JSON object per line (proxy module).
inline constexpr std::string_view kTraceLogFile = "trace.jsonl";

// ---- Helpers (the only places these names are assembled) ----

enum class DiskFormat { kRaw, kQcow2 };
const char* DiskFormatName(DiskFormat format);  // "raw" / "qcow2" (qemu's -f names)
std::string_view DiskExtension(DiskFormat format);

// "system.7.qcow2", "home.3.img".
std::string LiveDiskFileName(std::string_view stem, uint64_t generation, DiskFormat format);
// "checkpoints/ID/system.qcow2" (relative to the workspace directory).
std::string CheckpointLayerPath(std::string_view checkpoint_id, std::string_view stem,
                                DiskFormat format);

}  // namespace cloister::layout
