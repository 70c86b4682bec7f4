// Env: every OS access of the workspace store goes through this interface (as LevelDB's Env), so
// the store's logic can be run against a fault-injecting Env (store/fault_injection_env.h) that
// "crashes" at any mutating step.
//
// Contract for implementations:
// - Paths are absolute. Errors are values (ErrnoError codes: kNotFound, kNoSpace, ...).
// - Mutating primitives (WriteFile, SyncFile, SyncDir, Rename, Link, RemoveFile, RemoveDir,
//   CreateDir, Truncate, CloneFile, CopyFile, RunTool) are the unit of fault injection: each is one "step".
// - The helpers at the bottom (AtomicWriteFile, CreateDirs, RemoveAll) are built only from the
//   primitives, so a crash can land between any two of their steps.
// - Thread-safety: PosixEnv is stateless and safe from any thread.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/result.h"
#include "base/subprocess.h"

namespace cloister {

struct FileInfo {
  bool exists = false;
  bool is_dir = false;
  bool is_regular = false;
  uint32_t mode = 0;         // permission bits
  uint64_t apparent = 0;     // st_size
  uint64_t allocated = 0;    // st_blocks * 512: what the file really takes on disk
  uint64_t inode = 0;
  uint64_t device = 0;
  uint64_t nlink = 0;
  int64_t mtime_ns = 0;
};

// Held lock; releasing = destroying (closing the descriptor, as a crashed process's would be).
class FileLock {
 public:
  virtual ~FileLock() = default;
};

class Env {
 public:
  virtual ~Env() = default;

  // The process-wide PosixEnv.
  static Env* Default();

  // ---- Reads (never counted as steps) ----
  // Reads at most `max_bytes`; a longer file is kCorrupt (stored files are bounded documents).
  virtual Result<std::string> ReadFile(const std::string& path, size_t max_bytes = 16 << 20) = 0;
  // lstat(2); a missing path is {exists=false}, not an error.
  virtual Result<FileInfo> Stat(const std::string& path) = 0;
  // Names in a directory (no "." / ".."), sorted.
  virtual Result<std::vector<std::string>> ListDir(const std::string& path) = 0;
  // Bytes available to an unprivileged user on the filesystem holding `path`.
  virtual Result<uint64_t> FreeSpace(const std::string& path) = 0;

  // ---- Mutating primitives (one step each) ----
  // Creates or truncates `path` (mode 0644 unless given) and writes `data`. No fsync.
  virtual Status WriteFile(const std::string& path, const std::string& data,
                           uint32_t mode = 0644) = 0;
  virtual Status SyncFile(const std::string& path) = 0;
  virtual Status SyncDir(const std::string& path) = 0;
  // rename(2); with `no_replace`, fails kAlreadyExists if `to` exists (RENAME_NOREPLACE).
  virtual Status Rename(const std::string& from, const std::string& to, bool no_replace = false) = 0;
  // link(2): a second name for the same inode.
  virtual Status Link(const std::string& from, const std::string& to) = 0;
  // unlink(2); a missing file is OK (deleting is idempotent).
  virtual Status RemoveFile(const std::string& path) = 0;
  // rmdir(2) of an empty directory; a missing one is OK.
  virtual Status RemoveDir(const std::string& path) = 0;
  // mkdir(2); kAlreadyExists if it exists.
  virtual Status CreateDir(const std::string& path, uint32_t mode = 0755) = 0;
  // Creates `path` if needed and sets its size (sparse: no blocks are written).
  virtual Status Truncate(const std::string& path, uint64_t size) = 0;
  // FICLONE `from` into a new file `to` (reflink: shares every block copy-on-write; O(extents)).
  // kUnavailable when the filesystem cannot (ext4, tmpfs, across filesystems); `to` is then
  // removed.
  virtual Status CloneFile(const std::string& from, const std::string& to) = 0;
  // Copies `from` into a new file `to` (mode 0600) for a disk that must not share a byte of its
  // source's storage with anyone who can delete the source: FICLONE when the filesystem can
  // (returns kReflink), else a sparse copy (kSparse): `to` is truncated to the source's size and
  // only the source's data extents (SEEK_DATA/SEEK_HOLE) are copied, so holes stay holes and read
  // as zeros. `progress`, when set, is called with the bytes copied so far after each piece (a
  // reflink reports the whole size once). On failure `to` is removed.
  enum class CopyMethod { kReflink, kSparse };
  virtual Result<CopyMethod> CopyFile(const std::string& from, const std::string& to,
                                      const std::function<void(uint64_t)>& progress = {}) = 0;
  // Runs an external tool (mkfs.ext4, qemu-img, ssh-keygen...) through RunProcess. Counted as one
  // step: a crash "at" it means the tool never ran.
  virtual Result<RunOutput> RunTool(const std::vector<std::string>& argv,
                                    const RunOptions& options = {}) = 0;

  // ---- Locks (not steps) ----
  // flock(2) LOCK_EX on `path` (created if missing). Without `wait`, a held lock is kBusy.
  virtual Result<std::unique_ptr<FileLock>> LockFile(const std::string& path, bool wait) = 0;

  // ---- Helpers built from the primitives ----
  // LevelDB's SetCurrentFile: write PATH.tmp, fsync it, rename over PATH, fsync the directory.
  // Readers see the old or the new content, never a mix.
  Status AtomicWriteFile(const std::string& path, const std::string& data, uint32_t mode = 0644);
  // mkdir -p; existing directories are fine.
  Status CreateDirs(const std::string& path, uint32_t mode = 0755);
  // rm -rf of one path (file or directory tree; symlinks are removed, never followed).
  Status RemoveAll(const std::string& path);
  // RunTool, turning a non-zero exit into an Error naming the tool and its last stderr line.
  Result<RunOutput> RunToolChecked(const std::vector<std::string>& argv,
                                   const RunOptions& options = {});
  bool Exists(const std::string& path);
};

// Directory part and last component of a path ("/a/b" -> "/a", "b").
std::string DirName(const std::string& path);
std::string BaseName(const std::string& path);
std::string JoinPath(const std::string& a, std::string_view b);

}  // namespace cloister
