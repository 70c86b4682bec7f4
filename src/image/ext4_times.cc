#include "image/ext4_times.h"

#include <ext2fs/ext2fs.h>

#include <cstring>
#include <vector>

namespace cloister::image {
namespace {

Error Ext2Error(const std::string& what, errcode_t err) {
  return Error(ErrorCode::kIo, what + ": " + error_message(err));
}

}  // namespace

Status NormalizeExt4Times(const std::string& image, int64_t epoch) {
  initialize_ext2_error_table();
  ext2_filsys fs = nullptr;
  errcode_t err = ext2fs_open(image.c_str(), EXT2_FLAG_RW | EXT2_FLAG_64BITS, 0, 0,
                              unix_io_manager, &fs);
  if (err) return Ext2Error("open " + image, err);
  fs->now = static_cast<time_t>(epoch);  // superblock times written at close
  ext2_inode_scan scan = nullptr;
  err = ext2fs_open_inode_scan(fs, 0, &scan);
  if (err) {
    ext2fs_close_free(&fs);
    return Ext2Error("inode scan " + image, err);
  }
  const int size = EXT2_INODE_SIZE(fs->super);
  std::vector<char> buf(static_cast<size_t>(size) < sizeof(ext2_inode_large)
                            ? sizeof(ext2_inode_large)
                            : static_cast<size_t>(size));
  auto* inode = reinterpret_cast<ext2_inode_large*>(buf.data());
  const auto t = static_cast<__u32>(epoch);
  Status status;
  for (;;) {
    ext2_ino_t ino = 0;
    err = ext2fs_get_next_inode_full(scan, &ino, reinterpret_cast<ext2_inode*>(inode), size);
    if (err) {
      status = Ext2Error("read inode", err);
      break;
    }
    if (ino == 0) break;
    if (inode->i_links_count == 0 && inode->i_mode == 0) continue;  // unused
    inode->i_atime = inode->i_ctime = inode->i_mtime = t;
    if (size > EXT2_GOOD_OLD_INODE_SIZE) {
      const unsigned extra = inode->i_extra_isize;
      auto has = [&](size_t end) { return EXT2_GOOD_OLD_INODE_SIZE + extra >= end; };
      if (has(offsetof(ext2_inode_large, i_ctime_extra) + 4)) inode->i_ctime_extra = 0;
      if (has(offsetof(ext2_inode_large, i_mtime_extra) + 4)) inode->i_mtime_extra = 0;
      if (has(offsetof(ext2_inode_large, i_atime_extra) + 4)) inode->i_atime_extra = 0;
      if (has(offsetof(ext2_inode_large, i_crtime) + 4)) inode->i_crtime = t;
      if (has(offsetof(ext2_inode_large, i_crtime_extra) + 4)) inode->i_crtime_extra = 0;
    }
    err = ext2fs_write_inode_full(fs, ino, reinterpret_cast<ext2_inode*>(inode), size);
    if (err) {
      status = Ext2Error("write inode " + std::to_string(ino), err);
      break;
    }
  }
  ext2fs_close_inode_scan(scan);
  fs->super->s_wtime = t;
  fs->super->s_mtime = 0;
  ext2fs_mark_super_dirty(fs);
  err = ext2fs_close_free(&fs);
  if (status.ok() && err) return Ext2Error("close " + image, err);
  return status;
}

}  // namespace cloister::image
