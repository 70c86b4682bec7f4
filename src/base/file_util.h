// File and socket helpers shared by every module that writes state outside the store's Env
// (the store goes through store/env.h so its writes can be fault-injected).
#pragma once

#include <sys/types.h>

#include <string>
#include <string_view>

#include "base/result.h"

namespace cloister {

// Writes all of `data` to `fd`, retrying on EINTR and short writes. `what` names the target in
// the error.
Status WriteAll(int fd, std::string_view data, const std::string& what);

// Creates or truncates `path` and writes all of `content`, then sets `mode` (not atomic: for
// files in a directory the caller owns and publishes as a whole, such as a build's staging tree;
// state files use WriteFileAtomic). Follows symlinks, like open(2) without O_NOFOLLOW.
Status WriteFile(const std::string& path, std::string_view content, mode_t mode = 0644);

// Replaces `path` atomically with `content` at `mode`: writes a temp file beside it (never
// following a symlink), fsyncs it, renames it over `path`, then fsyncs the directory. On failure
// the temp file is removed and `path` is untouched.
Status WriteFileAtomic(const std::string& path, std::string_view content, mode_t mode);

// How ReadFileBounded opens its path.
enum class Follow { kSymlinks, kNoSymlinks /* O_NOFOLLOW: a symlink at `path` is an error */ };

// Reads the whole of `path` if it holds at most `max_bytes` (EINTR retried). A missing file is
// kNotFound; a larger one is kCorrupt ("... is larger than N bytes") and nothing of it is returned.
// Partial data read before an error is zeroed before it is freed (secrets go through here).
Result<std::string> ReadFileBounded(const std::string& path, size_t max_bytes,
                                    Follow follow = Follow::kSymlinks);

// Reads `fd` to its end (EINTR retried) and returns at most the first `max_bytes`; the rest is
// read and dropped, so a writer on the other end of a pipe never blocks on a full pipe. A read
// error ends the read like end of file. For output of a child process that must stay bounded.
std::string DrainFdBounded(int fd, size_t max_bytes);

// Sends all of `data` on the connected unix socket `sock`; if `pass_fd` >= 0 it travels with the
// first byte as SCM_RIGHTS. `what` names the peer in the error.
Status SendAllWithFd(int sock, std::string_view data, int pass_fd, const std::string& what);

// An exclusive flock(2) on `path` (created 0644 if missing), held until destruction. Acquire
// waits for the lock (retrying EINTR). For locks that must not wait, or that tests inject faults
// into, use store::Env::Lock.
class FlockGuard {
 public:
  static Result<FlockGuard> Acquire(const std::string& path);
  FlockGuard(FlockGuard&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  FlockGuard& operator=(FlockGuard&&) = delete;
  FlockGuard(const FlockGuard&) = delete;
  ~FlockGuard();

 private:
  explicit FlockGuard(int fd) : fd_(fd) {}
  int fd_;
};

}  // namespace cloister
