// Normalising inode times inside an ext4 image (libext2fs).
//
// mkfs.ext4 -d copies each source file's atime and ctime into the image, and the kernel sets ctime
// to "now" whenever a file is created or chmod'ed: no userspace call can reset it. So after
// mkfs.ext4 -d we open the image with libext2fs and set every inode's atime/ctime/mtime/crtime to
// the build epoch (checksums are recomputed by the library).
#pragma once

#include <cstdint>
#include <string>

#include "base/result.h"

namespace cloister::image {

// Sets a/c/m/crtime (seconds = epoch, nanoseconds = 0) of every in-use inode of the ext4 image,
// and the superblock's write time, to `epoch`.
Status NormalizeExt4Times(const std::string& image, int64_t epoch);

}  // namespace cloister::image
