// The repository a devcontainer.json belongs to, and every path the file names, opened through
// directory fds only.
//
// FindDevcontainer: from what the user typed (nothing, a directory, or a file) to the repository's
// root and the devcontainer.json inside it. The root is the nearest directory at or above the
// start holding `.git` (a directory or a file), else the start itself (or, for a file inside a
// `.devcontainer` folder, that folder's parent). No git command runs: a repository's config can
// name programs git would start.
//
// RepoDir opens the root once (O_PATH) and every later path beneath it with openat2(RESOLVE_BENEATH
// | RESOLVE_NO_MAGICLINKS): `..` or a symlink that leaves the root (relative or absolute) is
// refused by the kernel, a symlink that stays inside is followed. Paths from the config are joined
// to the devcontainer.json's folder and normalised first, so one that climbs out is refused by
// name before the kernel sees it. CopyTree copies a folder (a local Feature) into a directory of
// cloister's without following any symlink (they are copied as symlinks, to be resolved inside
// the builder VM), bounded in bytes, entries and depth, and returns the SHA-256 of its contents.
//
// SECURITY: the repository is hostile (an agent may have written it, and may still be changing it
// through a read-write share while cloister reads it): nothing here opens a path of the
// repository by name from the host's root, nothing follows a symlink out of it, and every read
// is bounded. Needs Linux 5.6 (openat2); without it every open is refused (fail closed).
#pragma once

#include <cstdint>
#include <string>

#include "base/result.h"
#include "devcontainer/dockerignore.h"

namespace cloister::devcontainer {

struct DevcontainerLocation {
  std::string root;  // absolute path of the repository's root
  std::string file;  // the devcontainer.json, relative to root ("./.devcontainer/devcontainer.json")
  std::string Dir() const;  // the file's folder, relative to root ("" for the root itself)
};

// `spec` is "" (the current directory's repository), a directory, or a file; `cwd` is the
// current directory.
Result<DevcontainerLocation> FindDevcontainer(const std::string& spec, const std::string& cwd);

// `base` (a folder relative to the root, "" for the root) joined with `rel` and normalised:
// "a/b" + "../c" = "a/c". kPermissionDenied when it climbs above the root; "." for the root.
Result<std::string> JoinBeneath(const std::string& base, const std::string& rel);

struct CopyLimits {
  uint64_t max_bytes = 64ull << 20;
  uint64_t max_entries = 10000;
  int max_depth = 32;
};

struct TreeDigest {
  std::string sha256;  // over every entry's path, kind, executable bit and content or target
  uint64_t bytes = 0;
  uint64_t entries = 0;
};

class RepoDir {
 public:
  static Result<RepoDir> Open(const std::string& root);
  RepoDir(RepoDir&& other) noexcept;
  RepoDir& operator=(RepoDir&&) = delete;
  RepoDir(const RepoDir&) = delete;
  ~RepoDir();

  const std::string& root() const { return root_; }
  // The regular file at `rel` (normalised, beneath the root), at most `max_bytes`.
  Result<std::string> ReadFile(const std::string& rel, size_t max_bytes) const;
  // An O_RDONLY | O_DIRECTORY fd of the folder at `rel`; the caller closes it.
  Result<int> OpenDirectory(const std::string& rel) const;
  // Copies the folder at `rel` into `dest` (which must not exist; made 0755): regular files
  // (mode 0644, or 0755 when any execute bit was set), folders and symlinks (as symlinks); other
  // kinds are refused. What `ignore` excludes (a build context's .dockerignore) is neither
  // copied nor hashed (nor read: an excluded folder is not walked unless an exception may
  // include something in it).
  Result<TreeDigest> CopyTree(const std::string& rel, const std::string& dest,
                              const CopyLimits& limits = {},
                              const DockerIgnore* ignore = nullptr) const;
  // The same digest without copying.
  Result<TreeDigest> DigestTree(const std::string& rel, const CopyLimits& limits = {}) const;

 private:
  RepoDir(int fd, std::string root) : fd_(fd), root_(std::move(root)) {}
  Result<int> OpenBeneath(const std::string& rel, int flags) const;
  int fd_ = -1;
  std::string root_;
};

}  // namespace cloister::devcontainer
