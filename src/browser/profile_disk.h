// The browser VM's opt-in persistent profile (`cloister browser NAME start --keep-profile`,
// issue #18): a per-workspace disk encrypted by QEMU's own LUKS support, whose key lives only in
// the workspace's vault and reaches QEMU only through an fd.
//
// Files:
//   <workspace dir>/browser-profile.qcow2   qcow2 with encrypt.format=luks (layout.h
//       kBrowserProfileFile), holding an ext4 (label kProfileLabel) the browser VM's agent mounts
//       at /var/lib/cloister-browser. Created by EnsureProfileDisk, deleted by DestroyProfile.
//   <workspace dir>/browser-profile.qcow2.tmp*  creation temporaries (the empty ext4 before
//       encryption, the qcow2 before its rename): leftovers of a crash, deleted by the next
//       EnsureProfileDisk or DestroyProfile.
//   secret blob kProfileKeyBlob in <workspace dir>/secrets.enc (vault.h): 32 random bytes.
//
// SECURITY: the key is a secret. The LUKS passphrase is the key's base64 text (QEMU requires a
// UTF-8 passphrase); it is handed to qemu-img on a pipe (`--object secret,file=/dev/fd/0`) and to
// a running QEMU over its QMP socket (object-add of a `secret`), never in argv, the environment or
// a file. The encryption protects the profile at rest: the host's disk blocks, backups and copies
// of the store, and a workspace directory read by someone without the vault key. It does not
// protect the profile from a compromised host while the browser VM runs (QEMU holds the key).
//
// Locking: every function that writes (Ensure, Destroy) expects the caller to hold the workspace
// lock (store.h), as every mutating verb does; the vault file is rewritten atomically.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "base/result.h"

namespace cloister::vm {
class QmpClient;
}

namespace cloister::browser {

inline constexpr char kProfileKeyBlob[] = "browser-profile-key";  // vault blob name
inline constexpr size_t kProfileKeyBytes = 32;
inline constexpr char kProfileLabel[] = "cloister-profile";       // ext4 label
inline constexpr char kProfileSerial[] = "cloister-profile";      // virtio-blk serial
inline constexpr uint64_t kDefaultProfileSize = 2ull << 30;       // 2 GiB virtual, sparse
inline constexpr uint64_t kMinProfileSize = 64ull << 20;
inline constexpr uint64_t kMaxProfileSize = 256ull << 30;

// Where a workspace's profile lives. `keys_dir` is the store's keys directory (the vault master
// key), `workspace_dir` the workspace's directory, `workspace` its name (vault AAD).
struct ProfileLocation {
  std::string keys_dir;
  std::string workspace_dir;
  std::string workspace;
  std::string DiskPath() const;
  std::string SecretsPath() const;
};

// A profile disk ready to attach. Owns a copy of the key; wipes it when destroyed.
struct ProfileDisk {
  std::string path;          // absolute path of browser-profile.qcow2
  uint64_t virtual_size = 0;
  std::string key;           // SECURITY: 32 raw bytes
  ProfileDisk() = default;
  ProfileDisk(ProfileDisk&&) = default;
  ProfileDisk& operator=(ProfileDisk&&) = default;
  ~ProfileDisk();
  // The LUKS passphrase QEMU is given (base64 of `key`). SECURITY: a secret.
  std::string Passphrase() const;
};

// True when the disk file or the key exists (a workspace "has a kept profile").
Result<bool> ProfileExists(const ProfileLocation& loc);

// Returns the workspace's profile disk, creating it (key first, then the disk) if absent:
// mkfs.ext4 of a sparse raw temporary, then `qemu-img convert -O qcow2 -o encrypt.format=luks`
// with the passphrase on a pipe, then rename; the plaintext temporary is deleted on every path.
// An existing disk is checked to be a LUKS-encrypted qcow2 (fail closed: a plain one is refused
// with the hint to forget it); a disk without its key is refused the same way.
Result<ProfileDisk> EnsureProfileDisk(const ProfileLocation& loc,
                                      uint64_t size = kDefaultProfileSize);

// The virtual size from `qemu-img info --output=json` of the profile disk, or kCorrupt unless it
// is a qcow2 with LUKS encryption and no backing file. SECURITY: the qcow2 header is writable by
// the browser VM's QEMU (hostile once compromised), and this parses what qemu-img read from it:
// bounded (kMaxInfoBytes), no exceptions, type-checked fields. Fuzzed (fuzz/profile_disk_info).
inline constexpr size_t kMaxInfoBytes = 1 << 20;
Result<uint64_t> ParseProfileDiskInfo(std::string_view qemu_img_info_json);

// Deletes the disk (and creation leftovers), then the key. Idempotent: nothing there is success.
Status DestroyProfile(const ProfileLocation& loc);

// The StoreOptions::destroy_browser_profile hook (store.h): wipe-home and wipe call it.
std::function<Status(const std::string& name, const std::string& workspace_dir)>
DestroyProfileHook(std::string keys_dir);

struct AttachOptions {
  std::string node = "browser-profile";       // block node name
  std::string secret_id = "browser-profile-key";
  std::string device_id = "browser-profile-blk";
  // The bus for device_add. A q35 root bus (pcie.0) takes no hotplug, even paused with -S: give
  // the id of a `pcie-root-port` QEMU was started with. Empty: QEMU picks (fails on q35's root).
  std::string bus;
};

// Hands the disk to a running (or -S paused) QEMU: add-fd of the file (read-write and read-only,
// QEMU opens no path: vm/qemu_access.h), object-add of a `secret` carrying the passphrase
// (base64, over the QMP socket), blockdev-add of the encrypted qcow2, device_add of a virtio-blk
// with serial kProfileSerial (the guest finds the disk by /sys/block/vd*/serial). A wrong key
// fails at blockdev-add (kPermissionDenied); on any failure what was added is removed again.
Status AttachProfile(vm::QmpClient& qmp, const ProfileDisk& disk, const AttachOptions& options = {});

}  // namespace cloister::browser
