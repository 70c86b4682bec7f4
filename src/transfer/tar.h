// Host side of `cloister cp`: tar streams between the host's filesystem and a guest's `tar`.
//
// Who owns what: every function takes fds it does not own and never closes them. The caller
// runs the guest's side (an exec stream running busybox/GNU tar as dev) and plumbs its stdio here.
//
// SECURITY: a tar stream read from the guest is hostile. ExtractTar and FilterTar parse it with
// libarchive (tar formats only, no decompression filters) and hold every entry to one policy
// (CheckEntry in tar.cc) before anything is written:
//   - names are relative, without `.`/`..` components or empty ones, at most kMaxPath bytes, and
//     all under the one top entry the caller expects (renamed to the destination's name);
//   - only regular files, directories and symlinks are written; devices, fifos and sockets are
//     skipped (counted and reported); setuid/setgid/sticky bits are cleared; owners, ACLs,
//     xattrs and file flags are never restored;
//   - no entry is written through a symlink: not one the archive made (no later entry may have
//     an earlier symlink as a proper prefix) and not one on the host, even one the guest makes
//     while the copy runs (DST inside a read-write share): ExtractTar writes only through
//     directory fds, openat2 with RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS, files under a temporary
//     name renamed into place (beneath.h); libarchive only reads;
//   - a hard link may only name a regular file this same archive wrote before it.
// A refused entry stops the copy (fail closed): what was written before it stays. The guest can
// still fill the destination's filesystem with as many bytes as it sends (Ctrl-C stops a copy).
// Fuzzed by fuzz/tar_extract_fuzz.cc.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "base/result.h"

namespace cloister::transfer {

inline constexpr size_t kMaxPath = 4096;

struct EntryPolicy {
  // Every entry's first path component must be `top` (the guest's basename of SRC) ...
  std::string top;
  // ... and becomes `rename_top` on the host (empty: kept).
  std::string rename_top;
  // The destination is an existing regular file: the archive must hold exactly one regular file,
  // the top itself.
  bool top_must_be_file = false;
  // Told about each skipped entry (already made terminal-safe); may be empty.
  std::function<void(const std::string&)> warn;
};

struct TarStats {
  uint64_t entries = 0;  // written
  uint64_t bytes = 0;    // file data written
  uint64_t skipped = 0;  // devices, fifos, sockets
};

// Extracts the tar stream read from `in_fd` into the existing directory `dest_dir`, under
// `policy`. Modes (without setuid/setgid/sticky) and mtimes are kept. Thread safe (no working
// directory is used: everything is relative to dest_dir's fd).
Result<TarStats> ExtractTar(int in_fd, const std::string& dest_dir, const EntryPolicy& policy);

// Re-writes the tar stream read from `in_fd` onto `out_fd` (GNU tar format) after the same
// checks, for `cloister cp NAME:PATH -`: the host user's own tar then only sees entries that
// passed them.
Result<TarStats> FilterTar(int in_fd, int out_fd, const EntryPolicy& policy);

// Writes `src_path` (a file, a symlink, or a directory tree; symlinks are stored, never followed)
// as a tar stream on `out_fd` (GNU tar format), its top entry named `top_name`, owned by the
// guest's dev (1000:1000). Devices, fifos and sockets are skipped (counted, told to `warn`).
// Writes with MSG_NOSIGNAL when `out_fd` is a socket (a reader that went away is an error, not a
// SIGPIPE).
Result<TarStats> WriteTar(int out_fd, const std::string& src_path, const std::string& top_name,
                          const std::function<void(const std::string&)>& warn = {});

}  // namespace cloister::transfer
