#include "browser/profile_disk.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <optional>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/subprocess.h"
#include "store/layout.h"
#include "vault/crypto.h"
#include "vault/vault.h"
#include "vm/qmp.h"

namespace cloister::browser {
namespace {

using nlohmann::json;

constexpr char kRawTempSuffix[] = ".tmp-raw";    // the empty ext4 before encryption
constexpr char kQcowTempSuffix[] = ".tmp-qcow2"; // the encrypted qcow2 before its rename

vault::VaultLocation VaultOf(const ProfileLocation& loc) {
  return vault::VaultLocation{loc.keys_dir, loc.SecretsPath(), loc.workspace};
}

bool Exists(const std::string& path) {
  struct stat st;
  return lstat(path.c_str(), &st) == 0;
}

Status RemoveIfPresent(const std::string& path) {
  if (unlink(path.c_str()) != 0 && errno != ENOENT) return ErrnoError("delete " + path, errno);
  return OkStatus();
}

Status RemoveLeftovers(const ProfileLocation& loc) {
  RETURN_IF_ERROR(RemoveIfPresent(loc.DiskPath() + kRawTempSuffix));
  return RemoveIfPresent(loc.DiskPath() + kQcowTempSuffix);
}

std::string ForgetHint(const ProfileLocation& loc) {
  return "`cloister browser " + loc.workspace + " forget` drops the kept profile (its logins are lost)";
}

// SECURITY: refuses anything but a LUKS-encrypted qcow2 (fail closed: a profile that is not
// encrypted is never attached). `qemu-img info` opens no backing file and no payload here.
Result<uint64_t> CheckEncryptedQcow2(const ProfileLocation& loc) {
  const std::string path = loc.DiskPath();
  ASSIGN_OR_RETURN(RunOutput info,
                   RunProcessChecked({"qemu-img", "info", "--output=json", "-f", "qcow2", path}));
  Result<uint64_t> size = ParseProfileDiskInfo(info.out);
  if (!size.ok()) {
    return Error(size.error().code(), "the browser profile disk " + path + ": " +
                                          size.error().message(), ForgetHint(loc));
  }
  return size;
}

// Reads the key from the vault, or makes one and saves it (before any disk exists: a crash then
// leaves a key without a disk, which the next call reuses).
Result<std::string> LoadOrMakeKey(const ProfileLocation& loc, bool may_create) {
  ASSIGN_OR_RETURN(vault::Vault v, vault::Vault::Open(VaultOf(loc)));
  if (const std::string* blob = v.FindBlob(kProfileKeyBlob)) {
    if (blob->size() != kProfileKeyBytes) {
      return Error(ErrorCode::kCorrupt, "the browser profile key in the vault has the wrong size",
                   ForgetHint(loc));
    }
    return std::string(*blob);
  }
  if (!may_create) {
    return Error(ErrorCode::kFailedPrecondition,
                 "the browser profile disk exists but its key is not in the workspace's vault",
                 ForgetHint(loc));
  }
  ASSIGN_OR_RETURN(std::string key, vault::RandomBytes(kProfileKeyBytes));
  v.PutBlob(kProfileKeyBlob, key);
  RETURN_IF_ERROR(v.Save());
  return key;
}

// Builds the encrypted disk under a temporary name and renames it into place.
Status CreateDisk(const ProfileLocation& loc, const std::string& key, uint64_t size) {
  const std::string raw = loc.DiskPath() + kRawTempSuffix;
  const std::string qcow = loc.DiskPath() + kQcowTempSuffix;
  RETURN_IF_ERROR(RemoveLeftovers(loc));
  auto fail = [&](const Error& e) -> Status {
    (void)RemoveLeftovers(loc);  // SECURITY: no plaintext temporary survives a failure
    return e.WithContext("creating the browser profile disk");
  };
  {
    int fd = open(raw.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) return fail(ErrnoError("create " + raw, errno));
    int rc = ftruncate(fd, static_cast<off_t>(size));
    int err = errno;
    close(fd);
    if (rc != 0) return fail(ErrnoError("truncate " + raw, err));
  }
  // An empty filesystem: nothing but ext4 metadata is in the plaintext temporary.
  auto mk = RunProcessChecked({"mkfs.ext4", "-q", "-F", "-L", kProfileLabel, "-m", "0",
                               "-E", "lazy_itable_init=0,lazy_journal_init=0", raw});
  if (!mk.ok()) return fail(mk.error());
  ProfileDisk d;
  d.key = key;
  RunOptions run;
  // SECURITY: the passphrase reaches qemu-img on its stdin (a pipe), never argv, env or a file.
  // iter-time: the key is 256 random bits, so PBKDF stretching buys nothing; keep opens fast.
  run.stdin_data = d.Passphrase();
  // QEMU times PBKDF2 by the thread's CPU clock and gives up ("Unable to get accurate CPU usage")
  // when a round measured 0 ms, which a coarse clock on a loaded host sometimes does: retry that
  // error alone, a bounded number of times.
  Result<RunOutput> conv = Error(ErrorCode::kInternal, "qemu-img convert did not run");
  for (int attempt = 0; attempt < 8; ++attempt) {
    conv = RunProcessChecked(
        {"qemu-img", "convert", "--object", "secret,id=s0,file=/dev/fd/0", "-f", "raw", "-O",
         "qcow2", "-o", "encrypt.format=luks,encrypt.key-secret=s0,encrypt.iter-time=10", raw,
         qcow},
        run);
    if (conv.ok() || conv.error().message().find("accurate CPU usage") == std::string::npos) break;
    (void)RemoveIfPresent(qcow);
  }
  vault::SecureWipe(run.stdin_data);
  if (!conv.ok()) return fail(conv.error());
  RETURN_IF_ERROR(RemoveIfPresent(raw));
  {
    int fd = open(qcow.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return fail(ErrnoError("open " + qcow, errno));
    int rc = fsync(fd);
    close(fd);
    if (rc != 0) return fail(ErrnoError("fsync " + qcow, errno));
  }
  if (chmod(qcow.c_str(), 0600) != 0) return fail(ErrnoError("chmod " + qcow, errno));
  if (rename(qcow.c_str(), loc.DiskPath().c_str()) != 0) {
    return fail(ErrnoError("rename " + qcow, errno));
  }
  int dfd = open(loc.workspace_dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    (void)fsync(dfd);
    close(dfd);
  }
  return OkStatus();
}

Result<int64_t> FdSetId(const json& reply) {
  auto id = reply.find("fdset-id");
  if (id == reply.end() || !id->is_number_integer()) {
    return Error(ErrorCode::kInternal, "QMP add-fd: no fdset-id in the reply");
  }
  return id->get<int64_t>();
}

}  // namespace

Result<uint64_t> ParseProfileDiskInfo(std::string_view text) {
  if (text.size() > kMaxInfoBytes) {
    return Error(ErrorCode::kCorrupt, "qemu-img info output is too large");
  }
  json j = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return Error(ErrorCode::kCorrupt, "qemu-img info output is not a JSON object");
  auto str = [](const json& obj, const char* key) -> std::string {
    auto it = obj.find(key);
    return it != obj.end() && it->is_string() ? it->get<std::string>() : std::string();
  };
  auto obj = [](const json& o, const char* key) -> const json* {
    auto it = o.find(key);
    return it != o.end() && it->is_object() ? &*it : nullptr;
  };
  std::string fmt;
  if (const json* fs = obj(j, "format-specific")) {
    if (const json* data = obj(*fs, "data")) {
      if (const json* enc = obj(*data, "encrypt")) fmt = str(*enc, "format");
    }
  }
  auto vs = j.find("virtual-size");
  if (str(j, "format") != "qcow2" || fmt != "luks" || vs == j.end() ||
      !vs->is_number_unsigned() || j.contains("backing-filename") ||
      j.contains("full-backing-filename")) {
    return Error(ErrorCode::kCorrupt, "not a LUKS-encrypted qcow2 without a backing file");
  }
  return vs->get<uint64_t>();
}

std::string ProfileLocation::DiskPath() const {
  return workspace_dir + "/" + std::string(layout::kBrowserProfileFile);
}

std::string ProfileLocation::SecretsPath() const {
  return workspace_dir + "/" + std::string(layout::kSecretsFile);
}

ProfileDisk::~ProfileDisk() { vault::SecureWipe(key); }

std::string ProfileDisk::Passphrase() const { return vault::Base64Encode(key); }

Result<bool> ProfileExists(const ProfileLocation& loc) {
  if (Exists(loc.DiskPath())) return true;
  if (!Exists(loc.SecretsPath())) return false;
  ASSIGN_OR_RETURN(vault::Vault v, vault::Vault::Open(VaultOf(loc)));
  return v.FindBlob(kProfileKeyBlob) != nullptr;
}

Result<ProfileDisk> EnsureProfileDisk(const ProfileLocation& loc, uint64_t size) {
  if (size < kMinProfileSize || size > kMaxProfileSize || size % 4096) {
    return Error(ErrorCode::kInvalidArgument,
                 "browser profile size " + std::to_string(size) + " is out of range",
                 "use a multiple of 4096 between 64 MiB and 256 GiB");
  }
  bool have_disk = Exists(loc.DiskPath());
  ProfileDisk d;
  d.path = loc.DiskPath();
  ASSIGN_OR_RETURN(d.key, LoadOrMakeKey(loc, /*may_create=*/!have_disk));
  if (!have_disk) RETURN_IF_ERROR(CreateDisk(loc, d.key, size));
  RETURN_IF_ERROR(RemoveLeftovers(loc));
  ASSIGN_OR_RETURN(d.virtual_size, CheckEncryptedQcow2(loc));
  return d;
}

Status DestroyProfile(const ProfileLocation& loc) {
  // The disk first: a crash between the two leaves a key without a disk, which is harmless (the
  // next Ensure makes a new disk with it; the next Destroy drops it).
  RETURN_IF_ERROR(RemoveLeftovers(loc));
  RETURN_IF_ERROR(RemoveIfPresent(loc.DiskPath()));
  if (!Exists(loc.SecretsPath())) return OkStatus();
  ASSIGN_OR_RETURN(vault::Vault v, vault::Vault::Open(VaultOf(loc)));
  if (!v.FindBlob(kProfileKeyBlob)) return OkStatus();
  RETURN_IF_ERROR(v.RemoveBlob(kProfileKeyBlob));
  return v.Save();
}

std::function<Status(const std::string& name, const std::string& workspace_dir)>
DestroyProfileHook(std::string keys_dir) {
  return [keys_dir](const std::string& name, const std::string& workspace_dir) -> Status {
    return DestroyProfile(ProfileLocation{keys_dir, workspace_dir, name});
  };
}

Status AttachProfile(vm::QmpClient& qmp, const ProfileDisk& disk, const AttachOptions& options) {
  if (disk.key.size() != kProfileKeyBytes) {
    return Error(ErrorCode::kInvalidArgument, "browser profile: no key to attach the disk with");
  }
  // 1. The file, as fds (read-write and read-only) in one fd set.
  std::optional<int64_t> set;
  for (int flags : {O_RDWR, O_RDONLY}) {
    int fd = open(disk.path.c_str(), flags | O_CLOEXEC);
    if (fd < 0) return ErrnoError("open " + disk.path, errno);
    json args = json::object();
    if (set) args["fdset-id"] = *set;
    auto added = qmp.Execute("add-fd", args, std::chrono::seconds(10), fd);
    close(fd);
    if (!added.ok()) {
      if (set) (void)qmp.Execute("remove-fd", {{"fdset-id", *set}});
      return added.error().WithContext("browser profile: add-fd");
    }
    ASSIGN_OR_RETURN(int64_t id, FdSetId(*added));
    set = id;
  }
  auto undo_fds = [&] { (void)qmp.Execute("remove-fd", {{"fdset-id", *set}}); };
  // 2. The key, over the QMP socket only.
  // SECURITY: `data` is base64 of the passphrase; this JSON goes to the socket and nowhere else
  // (never logged; the error below carries QEMU's message, which does not echo it).
  {
    json secret = {{"qom-type", "secret"}, {"id", options.secret_id}, {"format", "base64"}};
    std::string pass = disk.Passphrase();
    secret["data"] = vault::Base64Encode(pass);
    vault::SecureWipe(pass);
    auto added = qmp.Execute("object-add", secret);
    std::string data = secret["data"].get<std::string>();
    vault::SecureWipe(data);
    secret["data"] = "";
    if (!added.ok()) {
      undo_fds();
      return added.error().WithContext("browser profile: object-add secret");
    }
  }
  auto undo_secret = [&] { (void)qmp.Execute("object-del", {{"id", options.secret_id}}); };
  // 3. The encrypted qcow2 (no backing: the profile is one layer).
  json add = {{"driver", "qcow2"},
              {"node-name", options.node},
              {"file", {{"driver", "file"}, {"filename", "/dev/fdset/" + std::to_string(*set)}}},
              {"backing", nullptr},
              {"encrypt", {{"format", "luks"}, {"key-secret", options.secret_id}}}};
  auto added = qmp.Execute("blockdev-add", add);
  if (!added.ok()) {
    undo_secret();
    undo_fds();
    const std::string& m = added.error().message();
    if (m.find("password") != std::string::npos || m.find("keyslot") != std::string::npos) {
      return Error(ErrorCode::kPermissionDenied,
                   "browser profile: the vault's key does not open " + disk.path,
                   "the disk and the key do not belong together; " +
                       std::string("`cloister browser NAME forget` drops both"));
    }
    return added.error().WithContext("browser profile: blockdev-add");
  }
  // 4. The device the guest sees.
  json dev = {{"driver", "virtio-blk-pci"},
              {"drive", options.node},
              {"id", options.device_id},
              {"serial", kProfileSerial}};
  if (!options.bus.empty()) dev["bus"] = options.bus;
  auto plugged = qmp.Execute("device_add", dev);
  if (!plugged.ok()) {
    (void)qmp.Execute("blockdev-del", {{"node-name", options.node}});
    undo_secret();
    undo_fds();
    return plugged.error().WithContext("browser profile: device_add").WithHint(
        "QEMU's q35 root bus takes no hotplug: start QEMU with a pcie-root-port and pass its id as "
        "AttachOptions::bus");
  }
  return OkStatus();
}

}  // namespace cloister::browser
