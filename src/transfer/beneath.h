// Writing files, directories, symlinks and hard links beneath one directory, through directory
// fds only (ExtractTar's writer, tar.h). Every path is resolved from the destination's fd with
// openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS), one component at a
// time; directories are made with mkdirat, symlinks with symlinkat and regular files are written
// under a temporary name in their directory (O_CREAT | O_EXCL | O_NOFOLLOW) and renamed into place
// with renameat, which replaces a name without following it.
//
// SECURITY: the destination may be inside a read-write share whose directories the guest changes
// while the copy runs (a root guest over 9p can turn a directory the copy just made into a symlink
// to anywhere). A check-then-open by path races with that; here nothing is ever opened by a path
// that could go through a symlink: a component that is a symlink when it is looked up is refused
// (ELOOP), an escape by ".." is refused (EXDEV), and an fd already held keeps naming the directory
// it was opened on wherever the guest moves it (within the share, which is the guest's already).
// The destination directory itself is opened once, as the user named it.
// Needs Linux 5.6 (openat2); without it every write is refused (fail closed).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "base/result.h"

namespace cloister::transfer {

class BeneathWriter {
 public:
  // Opens `dest_dir` (an existing directory).
  static Result<BeneathWriter> Open(const std::string& dest_dir);
  BeneathWriter(BeneathWriter&& other) noexcept;
  BeneathWriter& operator=(BeneathWriter&&) = delete;
  ~BeneathWriter();

  // `path` is the entry's checked relative name, split into components (no "", ".", "..").
  // Each of these makes the missing parents (mode 0777 less the umask) first.
  // A directory (an existing one is kept; a file or symlink in its place is replaced). Its mode
  // and mtime are set by FinishDirectories.
  Status MakeDirectory(const std::vector<std::string>& path, mode_t mode, int64_t mtime);
  // A regular file: `fill` gets a writable fd of a new file at a temporary name in the target's
  // directory and writes the data; then the mode and mtime are set and the file is renamed over
  // `path` (a file or symlink there is replaced, a directory is an error). On any error the
  // temporary file is removed.
  Status WriteFile(const std::vector<std::string>& path, mode_t mode, int64_t mtime,
                   const std::function<Status(int fd)>& fill);
  Status MakeSymlink(const std::vector<std::string>& path, const std::string& target, int64_t mtime);
  // A hard link at `path` to the existing `target` (both beneath the destination; the link is
  // made to whatever `target` names, never through a symlink).
  Status MakeHardLink(const std::vector<std::string>& path, const std::vector<std::string>& target);
  // Sets the mode and mtime of each directory made by MakeDirectory (after its contents were
  // written, as tar does: a read-only directory can still be filled). A directory that is no
  // longer one (the guest changed it) is left alone; the first other error is returned.
  Status FinishDirectories();

 private:
  struct DirFix {
    std::vector<std::string> path;
    mode_t mode;
    int64_t mtime;
  };
  explicit BeneathWriter(int root) : root_(root) {}
  // An O_PATH fd of the directory holding path's last component (its missing ancestors made);
  // owned by the writer (cached for the next entry in the same directory): do not close it.
  Result<int> Parent(const std::vector<std::string>& path);
  // An fd of path[0..n-1] opened with `last_flags` (O_PATH | O_DIRECTORY for the ones on the
  // way), each component beneath the last one and never a symlink; `make`: missing ones are made.
  // root_ itself when n == 0 and last_flags is O_PATH | O_DIRECTORY; the caller closes any other.
  Result<int> OpenDir(const std::vector<std::string>& path, size_t n, int last_flags, bool make);

  int root_ = -1;
  int parent_ = -1;                  // the cached Parent fd ...
  std::vector<std::string> parent_path_;  // ... and the components it names
  std::vector<DirFix> dirs_;
};

}  // namespace cloister::transfer
