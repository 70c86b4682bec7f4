// Helpers shared by the test and full image builders: files, reproducible filesystems, progress.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "base/file_util.h"
#include "base/result.h"
#include "catalog/entry.h"

namespace cloister::image {

// Fixed build time of every image: all mtimes, ext4 superblock times and mmdebstrap's clock.
inline constexpr int64_t kSourceDateEpoch = 1704067200;  // 2024-01-01T00:00:00Z

// One line of build progress ("image: [2/6] initramfs: 4.6 MiB, 21 modules (0.3 s)").
using ProgressSink = std::function<void(const std::string& line)>;

// Numbered stages with timings. Start() prints the stage name; Done() its result and duration.
class Stages {
 public:
  Stages(ProgressSink sink, int total) : sink_(std::move(sink)), total_(total) {}
  void Start(const std::string& name);
  void Done(const std::string& detail);

 private:
  ProgressSink sink_;
  int total_;
  int index_ = 0;
  std::string name_;
  std::chrono::steady_clock::time_point start_;
};

// WriteFile is base/file_util.h's (cloister::WriteFile).
Result<std::string> ReadFile(const std::string& path, size_t max_bytes = 64 << 20);
Status MakeDirs(const std::string& path);
Status RemoveTree(const std::string& path);
Status CopyFile(const std::string& from, const std::string& to);

// Total bytes of regular files under `root` (not following symlinks).
uint64_t TreeBytes(const std::string& root);

// Sets the mtime and atime of every entry under `root` (symlinks themselves, not their targets)
// to `epoch`, so the filesystem image does not depend on when the build ran.
Status NormalizeMtimes(const std::string& root, int64_t epoch);

// A stable RFC 4122-shaped UUID derived from `seed` (SHA-256), so each image has a fixed
// filesystem UUID and directory hash seed.
std::string DeterministicUuid(std::string_view seed);

// Hashes the disk, kernel and initramfs exported in `out_dir` and appends them, in that order, as
// the catalog entry's artifacts.
Status AddArtifactDigests(const std::string& out_dir, catalog::ImageEntry* entry);

// The start of every recipe: the work directory (`work_dir`, or OUT_DIR/.work when empty) emptied
// and made, and `out_dir` made. Returns the work directory.
Result<std::string> FreshWorkDir(const std::string& out_dir, const std::string& work_dir);

// The image's disk: OUT_DIR/disk.raw, raw ext4 (label cloister-root) of `size_bytes` populated
// from `root`, its UUID and htree hash seed fixed by the image `name` (reproducible).
Status MakeImageDisk(const std::string& root, const std::string& out_dir, const std::string& name,
                     uint64_t size_bytes);

// The end of every recipe: the catalog entry for what it exported to `out_dir` (`name`,
// `version`, amd64, the contract's kernel command line, the post-install `steps` that ran, the
// artifacts' digests), then the work tree `work` removed and the current stage closed with the
// disk's digest.
Result<catalog::ImageEntry> FinishEntry(const std::string& name, const std::string& version,
                                        const std::vector<catalog::PostInstallStep>& steps,
                                        const std::string& out_dir, const std::string& work,
                                        Stages& stages);

// Runs each post-install step as `sh -c COMMAND sh ROOT` with a fixed environment
// (LC_ALL=C, SOURCE_DATE_EPOCH, a standard PATH).
Status RunPostInstall(const std::vector<catalog::PostInstallStep>& steps, const std::string& root);

struct Ext4Options {
  std::string label;
  std::string uuid;       // fixed filesystem UUID
  std::string hash_seed;  // fixed htree hash seed (a UUID)
  uint64_t size_bytes = 0;
  int64_t epoch = kSourceDateEpoch;  // every inode and superblock time
};
// Creates `image` (sparse, raw ext4, no partition table) populated from `root` with mkfs.ext4 -d.
Status MakeExt4(const std::string& root, const std::string& image, const Ext4Options& options);

// Writes a newc cpio archive of `root` (sorted paths, owner root, normalised mtimes) to `out`.
Status MakeCpio(const std::string& root, const std::string& out, int64_t epoch);

}  // namespace cloister::image
