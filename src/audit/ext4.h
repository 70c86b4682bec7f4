// Bounded, validated reading of an ext4 filesystem's allocation state: superblock, group
// descriptors and block bitmaps. Nothing else of the filesystem is read.
//
// SECURITY: the filesystem is guest-controlled (and, for the cross-tenant question, possibly
// crafted). Every field is range-checked before use, every checksum the filesystem carries is
// verified, and memory is bounded by the device size; a bad filesystem yields kCorrupt or
// kInvalidArgument with a message naming the field, never a crash or an out-of-bounds read.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "audit/device.h"
#include "base/result.h"

namespace cloister::audit {

// The allocation map of one ext4 filesystem: which filesystem blocks must not be touched.
// `in_use` is a conservative superset of what the filesystem owns: every block marked in an
// on-disk bitmap, every group's metadata (superblock and descriptor copies, reserved GDT blocks,
// bitmaps, inode tables) whether or not its bitmap is initialised, the blocks before
// s_first_data_block, and every block past the filesystem's end.
class Ext4Map {
 public:
  uint32_t block_size() const { return block_size_; }
  uint64_t blocks_count() const { return blocks_count_; }
  uint32_t groups() const { return groups_; }
  uint64_t free_blocks() const { return free_blocks_; }  // blocks not in use per `in_use`
  std::string uuid_hex() const { return uuid_hex_; }

  // True if filesystem block `block` is free. Blocks past blocks_count() are never free.
  bool IsFree(uint64_t block) const {
    if (block >= blocks_count_) return false;
    return (in_use_[block >> 6] & (uint64_t{1} << (block & 63))) == 0;
  }
  // True if every filesystem block overlapping the byte range [offset, offset+len) is free.
  bool RangeFree(uint64_t offset, uint64_t len) const;

  // Bit-for-bit equality of the allocation state (used to prove nothing moved while probing).
  bool SameAllocation(const Ext4Map& other) const {
    return block_size_ == other.block_size_ && blocks_count_ == other.blocks_count_ &&
           in_use_ == other.in_use_;
  }

 private:
  friend Result<Ext4Map> ReadExt4Map(Device& device);
  void MarkUsed(uint64_t block) {
    if (block < blocks_count_) in_use_[block >> 6] |= uint64_t{1} << (block & 63);
  }
  void MarkUsedRange(uint64_t first, uint64_t count);

  uint32_t block_size_ = 0;
  uint64_t blocks_count_ = 0;
  uint32_t groups_ = 0;
  uint64_t free_blocks_ = 0;
  std::string uuid_hex_;
  std::vector<uint64_t> in_use_;
};

// Largest filesystem the audit will map (blocks); keeps the in-memory bitmap <= 256 MiB.
inline constexpr uint64_t kMaxAuditBlocks = uint64_t{1} << 31;

// Reads and validates the superblock, group descriptors and block bitmaps of `device`.
// Refuses (kFailedPrecondition) filesystems whose journal needs recovery (their bitmaps on disk
// may be stale), and (kInvalidArgument) features whose layout the audit does not map: bigalloc,
// an external journal device.
Result<Ext4Map> ReadExt4Map(Device& device);

}  // namespace cloister::audit
