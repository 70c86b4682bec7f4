// The paths the share guard keeps the guest from making (issue 38): those host git's
// configuration names inside a read-write share (vm/share_git_config.h), present or not. A path
// is known by the directory it lies in, by identity (device and inode), and its name, so that a
// directory renamed away and made again, or another share's view of the same folder, is still
// covered:
//  - the last name of a protected path is refused whatever makes it (mkdir, a file, a symlink, a
//    device, a hard link, a rename onto it);
//  - a name on the way to one (`.husky` for `.husky/_`) may only be made by mkdir, and the new
//    directory then carries the rest of the path; a symlink, a file or a rename onto it is
//    refused (a directory renamed there could bring a guest-made `_` with it).
// Names compare ASCII case-insensitively, like vm/share_policy.h.
//
// SECURITY: `name` is read from QEMU's memory (the guest's bytes). The guest can grow the table
// (mkdir, rmdir, mkdir again): past 65,536 entries, a directory on the way to a protected path is
// refused rather than left unfollowed (fail closed).
#pragma once

#include <sys/types.h>

#include <compare>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace cloister::vm {

struct DirId {
  dev_t dev = 0;
  ino_t ino = 0;
  auto operator<=>(const DirId&) const = default;
};

class ProtectedNames {
 public:
  // `components`: the path below the directory `root` (each one path component, at least one).
  void Add(DirId root, std::vector<std::string> components);
  // 0 when `name` may be made in `dir` (`mkdir`: as a directory), else EPERM.
  int Check(DirId dir, std::string_view name, bool mkdir) const;
  // After `name` was made in `dir` as the directory `made` (or found there at start).
  void Made(DirId dir, std::string_view name, DirId made);
  bool empty() const { return table_.empty(); }
  size_t size() const { return count_; }

  static constexpr size_t kMaxContinuations = 65536;

 private:
  struct Rest {
    std::string name;               // the name in the directory
    std::vector<std::string> more;  // what follows below it; empty: the name is the path's end
  };
  std::map<DirId, std::vector<Rest>> table_;
  size_t count_ = 0;
};

}  // namespace cloister::vm
