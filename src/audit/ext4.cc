#include "audit/ext4.h"

#include <bit>
#include <cstring>

#include "audit/crc.h"
#include "base/strings.h"

namespace cloister::audit {
namespace {

// Superblock field offsets (relative to the superblock at byte 1024).
constexpr size_t kSbBlocksCountLo = 0x04;
constexpr size_t kSbFirstDataBlock = 0x14;
constexpr size_t kSbLogBlockSize = 0x18;
constexpr size_t kSbBlocksPerGroup = 0x20;
constexpr size_t kSbInodesPerGroup = 0x28;
constexpr size_t kSbMagic = 0x38;
constexpr size_t kSbRevLevel = 0x4C;
constexpr size_t kSbInodeSize = 0x58;
constexpr size_t kSbFeatureCompat = 0x5C;
constexpr size_t kSbFeatureIncompat = 0x60;
constexpr size_t kSbFeatureRoCompat = 0x64;
constexpr size_t kSbUuid = 0x68;
constexpr size_t kSbReservedGdtBlocks = 0xCE;
constexpr size_t kSbDescSize = 0xFE;
constexpr size_t kSbFirstMetaBg = 0x104;
constexpr size_t kSbBlocksCountHi = 0x150;
constexpr size_t kSbBackupBgs = 0x24C;
constexpr size_t kSbChecksumSeed = 0x270;
constexpr size_t kSbChecksumType = 0x175;
constexpr size_t kSbChecksum = 0x3FC;

constexpr uint32_t kCompatSparseSuper2 = 0x200;
constexpr uint32_t kIncompatRecover = 0x4;
constexpr uint32_t kIncompatJournalDev = 0x8;
constexpr uint32_t kIncompatMetaBg = 0x10;
constexpr uint32_t kIncompat64Bit = 0x80;
constexpr uint32_t kIncompatCsumSeed = 0x2000;
// Incompat features whose presence does not change where superblocks, descriptors, bitmaps and
// inode tables live: filetype, recover (handled), meta_bg (handled), extents, 64bit (handled),
// mmp, flex_bg, ea_inode, dirdata, csum_seed, largedir, inline_data, encrypt, casefold.
constexpr uint32_t kIncompatKnown = 0x2 | 0x4 | 0x10 | 0x40 | 0x80 | 0x100 | 0x200 | 0x400 |
                                    0x1000 | 0x2000 | 0x4000 | 0x8000 | 0x10000 | 0x20000;
constexpr uint32_t kRoCompatSparseSuper = 0x1;
constexpr uint32_t kRoCompatGdtCsum = 0x10;
constexpr uint32_t kRoCompatBigalloc = 0x200;
constexpr uint32_t kRoCompatMetadataCsum = 0x400;

// Group descriptor field offsets.
constexpr size_t kGdBlockBitmapLo = 0x00;
constexpr size_t kGdInodeBitmapLo = 0x04;
constexpr size_t kGdInodeTableLo = 0x08;
constexpr size_t kGdFlags = 0x12;
constexpr size_t kGdBlockBitmapCsumLo = 0x18;
constexpr size_t kGdChecksum = 0x1E;
constexpr size_t kGdBlockBitmapHi = 0x20;
constexpr size_t kGdInodeBitmapHi = 0x24;
constexpr size_t kGdInodeTableHi = 0x28;
constexpr size_t kGdBlockBitmapCsumHi = 0x38;
constexpr uint16_t kBgBlockUninit = 0x2;

uint16_t Le16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }
uint32_t Le32(const uint8_t* p) {
  return uint32_t{p[0]} | (uint32_t{p[1]} << 8) | (uint32_t{p[2]} << 16) | (uint32_t{p[3]} << 24);
}

Error Corrupt(const std::string& what) {
  return Error(ErrorCode::kCorrupt, "ext4: " + what,
               "the filesystem is damaged or not ext4; run e2fsck on it, or audit another disk");
}

std::string Hex32(uint32_t v) {
  static const char* d = "0123456789abcdef";
  std::string s = "0x";
  for (int i = 28; i >= 0; i -= 4) s += d[(v >> i) & 0xf];
  return s;
}

bool IsPowerOf(uint32_t n, uint32_t base) {
  if (n == 0) return false;
  while (n % base == 0) n /= base;
  return n == 1;
}

struct Geometry {
  uint32_t block_size = 0;
  uint64_t blocks_count = 0;
  uint32_t first_data_block = 0;
  uint32_t blocks_per_group = 0;
  uint32_t groups = 0;
  uint32_t desc_size = 0;
  uint32_t descs_per_block = 0;
  uint64_t gdt_blocks = 0;
  uint32_t reserved_gdt = 0;
  uint32_t first_meta_bg = 0;
  uint64_t inode_table_blocks = 0;
  bool meta_bg = false;
  bool is64 = false;
  bool sparse_super = false;
  bool sparse_super2 = false;
  uint32_t backup_bgs[2] = {0, 0};
  bool metadata_csum = false;
  bool gdt_csum = false;
  uint32_t csum_seed = 0;
  uint8_t uuid[16] = {};

  uint64_t GroupFirstBlock(uint64_t g) const {
    return first_data_block + g * uint64_t{blocks_per_group};
  }

  bool HasSuper(uint64_t g) const {
    if (g == 0) return true;
    if (sparse_super2) return g == backup_bgs[0] || g == backup_bgs[1];
    if (g <= 1 || !sparse_super) return true;
    if ((g & 1) == 0) return false;
    if (g > 0xffffffffu) return false;
    uint32_t n = static_cast<uint32_t>(g);
    return IsPowerOf(n, 3) || IsPowerOf(n, 5) || IsPowerOf(n, 7);
  }

  // Blocks at the start of group g holding a superblock copy and descriptor copies (kernel:
  // ext4_num_base_meta_clusters).
  uint64_t BaseMetaBlocks(uint64_t g) const {
    uint64_t num = HasSuper(g) ? 1 : 0;
    if (!meta_bg || g < uint64_t{first_meta_bg} * descs_per_block) {
      if (num) num += (meta_bg ? first_meta_bg : gdt_blocks) + reserved_gdt;
    } else {
      uint64_t idx = g % descs_per_block;
      if (idx == 0 || idx == 1 || idx == descs_per_block - 1) num += 1;
    }
    return num;
  }

  // Block holding descriptor block `i` (kernel: descriptor_loc).
  uint64_t DescriptorBlock(uint64_t i) const {
    if (!meta_bg || i < first_meta_bg) return first_data_block + 1 + i;
    uint64_t bg = i * descs_per_block;
    return GroupFirstBlock(bg) + (HasSuper(bg) ? 1 : 0);
  }
};

Result<Geometry> ParseSuperblock(const uint8_t* sb, uint64_t device_size) {
  Geometry g;
  if (Le16(sb + kSbMagic) != 0xEF53) {
    return Corrupt("no superblock at byte 1024 (magic " + Hex32(Le16(sb + kSbMagic)) +
                   ", want 0x0000ef53)");
  }
  uint32_t compat = Le32(sb + kSbFeatureCompat);
  uint32_t incompat = Le32(sb + kSbFeatureIncompat);
  uint32_t ro = Le32(sb + kSbFeatureRoCompat);
  g.metadata_csum = (ro & kRoCompatMetadataCsum) != 0;
  g.gdt_csum = (ro & kRoCompatGdtCsum) != 0;
  if (g.metadata_csum) {
    if (sb[kSbChecksumType] != 1) {
      return Corrupt("unknown superblock checksum type " + std::to_string(sb[kSbChecksumType]));
    }
    uint32_t want = Le32(sb + kSbChecksum);
    uint32_t got = Crc32cUpdate(0xffffffffu, sb, kSbChecksum);
    if (want != got) {
      return Corrupt("superblock checksum mismatch (stored " + Hex32(want) + ", computed " +
                     Hex32(got) + ")");
    }
  }
  if (incompat & kIncompatJournalDev) {
    return Error(ErrorCode::kInvalidArgument, "ext4: this is an external journal device, not a filesystem");
  }
  if ((incompat & ~kIncompatKnown) != 0) {
    return Error(ErrorCode::kInvalidArgument,
                 "ext4: unsupported incompatible features " + Hex32(incompat & ~kIncompatKnown),
                 "the audit maps only standard ext4 layouts");
  }
  if (ro & kRoCompatBigalloc) {
    return Error(ErrorCode::kInvalidArgument, "ext4: bigalloc filesystems are not supported by the audit");
  }
  if (incompat & kIncompatRecover) {
    return Error(ErrorCode::kFailedPrecondition,
                 "ext4: the journal needs recovery, so the bitmaps on disk may be stale",
                 "freeze the mounted filesystem (the audit does this itself), or run e2fsck first");
  }
  uint32_t log_bs = Le32(sb + kSbLogBlockSize);
  if (log_bs > 6) return Corrupt("block size 2^(10+" + std::to_string(log_bs) + ") out of range");
  g.block_size = 1024u << log_bs;
  g.is64 = (incompat & kIncompat64Bit) != 0;
  g.meta_bg = (incompat & kIncompatMetaBg) != 0;
  g.sparse_super = (ro & kRoCompatSparseSuper) != 0;
  g.sparse_super2 = (compat & kCompatSparseSuper2) != 0;
  g.backup_bgs[0] = Le32(sb + kSbBackupBgs);
  g.backup_bgs[1] = Le32(sb + kSbBackupBgs + 4);
  std::memcpy(g.uuid, sb + kSbUuid, 16);

  g.blocks_count = Le32(sb + kSbBlocksCountLo);
  if (g.is64) g.blocks_count |= uint64_t{Le32(sb + kSbBlocksCountHi)} << 32;
  g.first_data_block = Le32(sb + kSbFirstDataBlock);
  if (g.first_data_block != (g.block_size == 1024 ? 1u : 0u)) {
    return Corrupt("s_first_data_block " + std::to_string(g.first_data_block) +
                   " does not match block size " + std::to_string(g.block_size));
  }
  g.blocks_per_group = Le32(sb + kSbBlocksPerGroup);
  if (g.blocks_per_group < 8 || g.blocks_per_group > 8 * g.block_size ||
      g.blocks_per_group % 8 != 0) {
    return Corrupt("s_blocks_per_group " + std::to_string(g.blocks_per_group) + " out of range");
  }
  uint32_t inodes_per_group = Le32(sb + kSbInodesPerGroup);
  if (inodes_per_group == 0 || inodes_per_group > 8 * g.block_size) {
    return Corrupt("s_inodes_per_group " + std::to_string(inodes_per_group) + " out of range");
  }
  uint32_t inode_size = Le32(sb + kSbRevLevel) >= 1 ? Le16(sb + kSbInodeSize) : 128;
  if (inode_size < 128 || inode_size > g.block_size || (inode_size & (inode_size - 1)) != 0) {
    return Corrupt("inode size " + std::to_string(inode_size) + " out of range");
  }
  g.inode_table_blocks =
      (uint64_t{inodes_per_group} * inode_size + g.block_size - 1) / g.block_size;

  if (g.blocks_count <= g.first_data_block + 1) {
    return Corrupt("s_blocks_count " + std::to_string(g.blocks_count) + " is too small");
  }
  uint64_t device_blocks = device_size / g.block_size;
  if (g.blocks_count > device_blocks) {
    return Corrupt("filesystem claims " + std::to_string(g.blocks_count) + " blocks of " +
                   std::to_string(g.block_size) + " bytes but the device holds only " +
                   std::to_string(device_blocks));
  }
  if (g.blocks_count > kMaxAuditBlocks) {
    return Error(ErrorCode::kInvalidArgument,
                 "ext4: filesystem of " + std::to_string(g.blocks_count) +
                     " blocks is larger than the audit maps (" + std::to_string(kMaxAuditBlocks) + ")");
  }
  uint64_t groups = (g.blocks_count - g.first_data_block + g.blocks_per_group - 1) / g.blocks_per_group;
  g.groups = static_cast<uint32_t>(groups);  // <= 2^31 / 8

  if (g.is64) {
    g.desc_size = Le16(sb + kSbDescSize);
    if (g.desc_size < 64 || g.desc_size > 1024 || (g.desc_size & (g.desc_size - 1)) != 0 ||
        g.desc_size > g.block_size) {
      return Corrupt("s_desc_size " + std::to_string(g.desc_size) + " out of range");
    }
  } else {
    g.desc_size = 32;
  }
  g.descs_per_block = g.block_size / g.desc_size;
  g.gdt_blocks = (uint64_t{g.groups} + g.descs_per_block - 1) / g.descs_per_block;
  g.reserved_gdt = Le16(sb + kSbReservedGdtBlocks);
  if (g.reserved_gdt > g.block_size / 4) {
    return Corrupt("s_reserved_gdt_blocks " + std::to_string(g.reserved_gdt) + " out of range");
  }
  if (g.meta_bg) {
    g.first_meta_bg = Le32(sb + kSbFirstMetaBg);
    if (g.first_meta_bg > g.gdt_blocks) {
      return Corrupt("s_first_meta_bg " + std::to_string(g.first_meta_bg) + " past the " +
                     std::to_string(g.gdt_blocks) + " descriptor blocks");
    }
  }
  if (!g.meta_bg && 1 + g.first_data_block + g.gdt_blocks + g.reserved_gdt > g.blocks_per_group) {
    return Corrupt("group descriptor table does not fit in the first group");
  }
  if (incompat & kIncompatCsumSeed) {
    g.csum_seed = Le32(sb + kSbChecksumSeed);
  } else {
    g.csum_seed = Crc32cUpdate(0xffffffffu, g.uuid, 16);
  }
  return g;
}

Status VerifyDescriptor(const Geometry& g, uint32_t group, const uint8_t* d) {
  uint8_t le_group[4] = {static_cast<uint8_t>(group), static_cast<uint8_t>(group >> 8),
                         static_cast<uint8_t>(group >> 16), static_cast<uint8_t>(group >> 24)};
  uint16_t stored = Le16(d + kGdChecksum);
  uint16_t computed;
  if (g.metadata_csum) {
    uint32_t c = Crc32cUpdate(g.csum_seed, le_group, 4);
    c = Crc32cUpdate(c, d, kGdChecksum);
    const uint8_t zero[2] = {0, 0};
    c = Crc32cUpdate(c, zero, 2);
    if (kGdChecksum + 2 < g.desc_size) c = Crc32cUpdate(c, d + kGdChecksum + 2, g.desc_size - kGdChecksum - 2);
    computed = static_cast<uint16_t>(c & 0xffff);
  } else if (g.gdt_csum) {
    uint16_t c = Crc16Update(0xffff, g.uuid, 16);
    c = Crc16Update(c, le_group, 4);
    c = Crc16Update(c, d, kGdChecksum);
    if (g.is64 && kGdChecksum + 2 < g.desc_size) {
      c = Crc16Update(c, d + kGdChecksum + 2, g.desc_size - kGdChecksum - 2);
    }
    computed = c;
  } else {
    return OkStatus();
  }
  if (stored != computed) {
    return Corrupt("group " + std::to_string(group) + " descriptor checksum mismatch (stored " +
                   Hex32(stored) + ", computed " + Hex32(computed) + ")");
  }
  return OkStatus();
}

}  // namespace

void Ext4Map::MarkUsedRange(uint64_t first, uint64_t count) {
  if (first >= blocks_count_) return;
  if (count > blocks_count_ - first) count = blocks_count_ - first;
  for (uint64_t b = first; b < first + count; ++b) MarkUsed(b);
}

bool Ext4Map::RangeFree(uint64_t offset, uint64_t len) const {
  if (len == 0 || block_size_ == 0) return false;
  if (offset + len < offset) return false;
  uint64_t first = offset / block_size_;
  uint64_t last = (offset + len - 1) / block_size_;
  for (uint64_t b = first; b <= last; ++b) {
    if (!IsFree(b)) return false;
  }
  return true;
}

Result<Ext4Map> ReadExt4Map(Device& device) {
  // SECURITY: everything read below is guest-controlled; see the header.
  if (device.size() < 2048) {
    return Corrupt("device of " + std::to_string(device.size()) + " bytes is too small to hold ext4");
  }
  uint8_t sb[1024];
  RETURN_IF_ERROR(device.ReadAt(1024, sb, sizeof(sb)));
  ASSIGN_OR_RETURN(Geometry g, ParseSuperblock(sb, device.size()));

  Ext4Map map;
  map.block_size_ = g.block_size;
  map.blocks_count_ = g.blocks_count;
  map.groups_ = g.groups;
  map.uuid_hex_ = HexEncode(std::string_view(reinterpret_cast<const char*>(g.uuid), 16));
  map.in_use_.assign((g.blocks_count + 63) / 64, 0);
  map.MarkUsedRange(0, g.first_data_block + 1);  // boot block(s) and the primary superblock

  std::vector<uint8_t> desc_block(g.block_size);
  std::vector<uint8_t> bitmap(g.block_size);
  uint64_t loaded_desc_block = UINT64_MAX;
  for (uint32_t group = 0; group < g.groups; ++group) {
    uint64_t desc_index = group / g.descs_per_block;
    if (desc_index != loaded_desc_block) {
      uint64_t loc = g.DescriptorBlock(desc_index);
      if (loc >= g.blocks_count) {
        return Corrupt("descriptor block " + std::to_string(desc_index) + " at block " +
                       std::to_string(loc) + " is past the filesystem's end");
      }
      RETURN_IF_ERROR(device.ReadAt(loc * g.block_size, desc_block.data(), g.block_size));
      map.MarkUsed(loc);
      loaded_desc_block = desc_index;
    }
    const uint8_t* d = desc_block.data() + (group % g.descs_per_block) * g.desc_size;
    RETURN_IF_ERROR(VerifyDescriptor(g, group, d));
    bool wide = g.is64 && g.desc_size >= 64;
    uint64_t block_bitmap = Le32(d + kGdBlockBitmapLo);
    uint64_t inode_bitmap = Le32(d + kGdInodeBitmapLo);
    uint64_t inode_table = Le32(d + kGdInodeTableLo);
    if (wide) {
      block_bitmap |= uint64_t{Le32(d + kGdBlockBitmapHi)} << 32;
      inode_bitmap |= uint64_t{Le32(d + kGdInodeBitmapHi)} << 32;
      inode_table |= uint64_t{Le32(d + kGdInodeTableHi)} << 32;
    }
    auto in_fs = [&](uint64_t b) { return b > g.first_data_block && b < g.blocks_count; };
    if (!in_fs(block_bitmap) || !in_fs(inode_bitmap) || !in_fs(inode_table) ||
        g.inode_table_blocks > g.blocks_count - inode_table) {
      return Corrupt("group " + std::to_string(group) +
                     " descriptor points outside the filesystem (block bitmap " +
                     std::to_string(block_bitmap) + ", inode bitmap " + std::to_string(inode_bitmap) +
                     ", inode table " + std::to_string(inode_table) + ")");
    }
    uint64_t first = g.GroupFirstBlock(group);
    map.MarkUsedRange(first, g.BaseMetaBlocks(group));
    map.MarkUsed(block_bitmap);
    map.MarkUsed(inode_bitmap);
    map.MarkUsedRange(inode_table, g.inode_table_blocks);

    bool uninit = (g.metadata_csum || g.gdt_csum) && (Le16(d + kGdFlags) & kBgBlockUninit);
    if (uninit) continue;  // no block allocated beyond the metadata marked above
    RETURN_IF_ERROR(device.ReadAt(block_bitmap * g.block_size, bitmap.data(), g.block_size));
    if (g.metadata_csum) {
      uint32_t c = Crc32cUpdate(g.csum_seed, bitmap.data(), g.blocks_per_group / 8);
      uint32_t stored = Le16(d + kGdBlockBitmapCsumLo);
      if (g.desc_size >= kGdBlockBitmapCsumHi + 4) {
        stored |= uint32_t{Le16(d + kGdBlockBitmapCsumHi)} << 16;
      } else {
        c &= 0xffff;
      }
      if (c != stored) {
        return Corrupt("group " + std::to_string(group) + " block bitmap checksum mismatch (stored " +
                       Hex32(stored) + ", computed " + Hex32(c) + ")");
      }
    }
    uint64_t in_group = std::min<uint64_t>(g.blocks_per_group, g.blocks_count - first);
    for (uint64_t j = 0; j < in_group; ++j) {
      if (bitmap[j >> 3] & (1u << (j & 7))) map.MarkUsed(first + j);
    }
  }
  uint64_t used = 0;
  for (uint64_t w : map.in_use_) used += static_cast<uint64_t>(std::popcount(w));
  map.free_blocks_ = g.blocks_count - used;
  return map;
}

}  // namespace cloister::audit
