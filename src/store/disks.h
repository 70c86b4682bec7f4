// Disk files of a workspace: the system disk clone, the home image, qcow2 overlays and rebases.
// Every tool runs through Env::RunTool (argv, no shell), so each is one fault-injection step.
#pragma once

#include <cstdint>
#include <string>

#include "base/result.h"
#include "store/env.h"
#include "store/layout.h"

namespace cloister {

enum class SystemDiskMode {
  kAuto,     // FICLONE reflink when the store's filesystem can, else a qcow2 overlay
  kReflink,  // reflink or fail (tests)
  kQcow2,    // always a qcow2 overlay
};

// Makes `dest` (absolute) a copy-on-write clone of the raw base image, in O(1) of its size:
// FICLONE when possible (returns kRaw), else `qemu-img create -f qcow2 -F raw -b BASE` with the
// absolute base path (returns kQcow2). `dest_stem_path` is the path without extension; the
// extension follows the format chosen.
Result<layout::DiskFormat> CloneSystemDisk(Env* env, const std::string& base,
                                           uint64_t base_size, const std::string& dest_stem_path,
                                           SystemDiskMode mode);

// Sparse ext4 home image of apparent size `size`: mkfs.ext4 with the root directory owned by
// the guest user (1000:1000), label "cloister-home", nothing written but metadata (the file is
// discarded first, so every inode table is marked zeroed and the guest never zeroes them).
// `uuid` and `fake_time` make the image reproducible byte for byte (the residue test rebuilds
// one to compare).
Status MakeHomeImage(Env* env, const std::string& path, uint64_t size, const std::string& uuid,
                     int64_t fake_time);
// A UUID string derived from `seed` (SHA-256), for MakeHomeImage.
std::string DeriveUuid(const std::string& seed);

// New qcow2 overlay at `path` over `backing` (absolute), not opening the backing file (-u), so it
// works while a running QEMU holds the backing file locked.
Status CreateOverlay(Env* env, const std::string& path, const std::string& backing,
                     layout::DiskFormat backing_format, uint64_t virtual_size);

// Safe `qemu-img rebase` of the qcow2 `path` onto `new_backing` (absolute, must be in its current
// chain): copies into `path` exactly the clusters it needs so that what the guest reads does not
// change. Cost grows with the data of the layers skipped, not with the disk size. Idempotent.
Status RebaseOverlay(Env* env, const std::string& path, const std::string& new_backing,
                     layout::DiskFormat new_backing_format);

}  // namespace cloister
