#include "store/disks.h"

#include <openssl/evp.h>

#include <cstdio>

#include "store/config.h"

namespace cloister {

Result<layout::DiskFormat> CloneSystemDisk(Env* env, const std::string& base, uint64_t base_size,
                                           const std::string& dest_stem_path,
                                           SystemDiskMode mode) {
  if (mode != SystemDiskMode::kQcow2) {
    std::string dest = dest_stem_path + std::string(layout::kRawExtension);
    Status s = env->CloneFile(base, dest);
    if (s.ok()) return layout::DiskFormat::kRaw;
    if (s.error().code() != ErrorCode::kUnavailable || mode == SystemDiskMode::kReflink) {
      return s.error();
    }
  }
  std::string dest = dest_stem_path + std::string(layout::kQcow2Extension);
  RETURN_IF_ERROR(CreateOverlay(env, dest, base, layout::DiskFormat::kRaw, base_size));
  return layout::DiskFormat::kQcow2;
}

std::string DeriveUuid(const std::string& seed) {
  unsigned char d[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(seed.data(), seed.size(), d, &len, EVP_sha256(), nullptr);
  d[6] = static_cast<unsigned char>((d[6] & 0x0f) | 0x40);  // version 4 layout
  d[8] = static_cast<unsigned char>((d[8] & 0x3f) | 0x80);  // RFC 4122 variant
  char buf[37];
  std::snprintf(buf, sizeof(buf),
                "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", d[0], d[1],
                d[2], d[3], d[4], d[5], d[6], d[7], d[8], d[9], d[10], d[11], d[12], d[13], d[14],
                d[15]);
  return buf;
}

Status MakeHomeImage(Env* env, const std::string& path, uint64_t size, const std::string& uuid,
                     int64_t fake_time) {
  RETURN_IF_ERROR(env->Truncate(path, size));
  std::string owner = std::to_string(kGuestUid) + ":" + std::to_string(kGuestGid);
  RunOptions opts;
  opts.env_set["E2FSPROGS_FAKE_TIME"] = std::to_string(fake_time);
  Result<RunOutput> r = env->RunToolChecked(
      // discard: mkfs discards the fresh sparse file first (a hole punch of nothing), so it knows
      // the blocks read as zeros and marks every group's inode table zeroed. With nodiscard the
      // guest kernel's ext4lazyinit zeroed them at the first mount instead: 1 GiB of zero-out
      // requests for a 64 GiB home, beside the agent's setup and for the boot's first minute.
      {"mkfs.ext4", "-q", "-F", "-m", "0", "-L", "cloister-home", "-U", uuid, "-E",
       "root_owner=" + owner + ",lazy_itable_init=1,lazy_journal_init=1,discard,hash_seed=" +
           uuid,
       path},
      opts);
  if (!r.ok()) return r.error().WithContext("making home image " + path);
  return OkStatus();
}

Status CreateOverlay(Env* env, const std::string& path, const std::string& backing,
                     layout::DiskFormat backing_format, uint64_t virtual_size) {
  Result<RunOutput> r = env->RunToolChecked(
      {"qemu-img", "create", "-q", "-f", "qcow2", "-u", "-F",
       layout::DiskFormatName(backing_format), "-b", backing, path, std::to_string(virtual_size)});
  if (!r.ok()) return r.error().WithContext("creating overlay " + path);
  return OkStatus();
}

Status RebaseOverlay(Env* env, const std::string& path, const std::string& new_backing,
                     layout::DiskFormat new_backing_format) {
  Result<RunOutput> r = env->RunToolChecked({"qemu-img", "rebase", "-q", "-f", "qcow2", "-F",
                                             layout::DiskFormatName(new_backing_format), "-b",
                                             new_backing, path});
  if (!r.ok()) return r.error().WithContext("rebasing " + path);
  return OkStatus();
}

}  // namespace cloister
