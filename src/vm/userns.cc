#include "vm/userns.h"

#include <fcntl.h>
#include <linux/mount.h>
#include <sched.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <sstream>

namespace cloister::vm {
namespace {

Status WriteProcFile(const std::string& path, const std::string& data) {
  int fd = open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoError("open " + path, errno);
  ssize_t n = write(fd, data.data(), data.size());
  int err = errno;
  close(fd);
  if (n != static_cast<ssize_t>(data.size())) return ErrnoError("write " + path, n < 0 ? err : EIO);
  return OkStatus();
}

}  // namespace

Result<int> MakeUserNamespace(const std::string& uid_map, const std::string& gid_map) {
  int ready[2], release[2];
  if (pipe2(ready, O_CLOEXEC) != 0) return ErrnoError("pipe", errno);
  if (pipe2(release, O_CLOEXEC) != 0) {
    close(ready[0]);
    close(ready[1]);
    return ErrnoError("pipe", errno);
  }
  pid_t child = fork();
  if (child < 0) {
    int err = errno;
    for (int fd : {ready[0], ready[1], release[0], release[1]}) close(fd);
    return ErrnoError("fork", err);
  }
  if (child == 0) {  // raw system calls only: the parent may be multithreaded
    close(ready[0]);
    close(release[1]);  // else the read below never sees the parent's close
    char c = unshare(CLONE_NEWUSER) == 0 ? 'y' : 'n';
    if (write(ready[1], &c, 1) != 1) _exit(1);
    (void)!read(release[0], &c, 1);  // until the parent has the namespace's fd
    _exit(0);
  }
  close(ready[1]);
  close(release[0]);
  char c = 'n';
  bool made = read(ready[0], &c, 1) == 1 && c == 'y';
  close(ready[0]);
  Result<int> result = Error(ErrorCode::kUnavailable, "cannot make a user namespace",
                             "check user.max_user_namespaces (sysctl)");
  if (made) {
    std::string proc = "/proc/" + std::to_string(child);
    Status maps = WriteProcFile(proc + "/uid_map", uid_map);
    if (maps.ok()) maps = WriteProcFile(proc + "/gid_map", gid_map);
    if (!maps.ok()) {
      result = maps.error().WithContext("user namespace maps");
    } else {
      int fd = open((proc + "/ns/user").c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0) {
        result = ErrnoError("open " + proc + "/ns/user", errno);
      } else {
        result = fd;
      }
    }
  }
  close(release[1]);
  while (waitpid(child, nullptr, 0) < 0 && errno == EINTR) {
  }
  return result;
}

Status CheckIdmappable(int dir_fd, int userns_fd, const std::string& path) {
  int tree = static_cast<int>(syscall(SYS_open_tree, dir_fd, "",
                                      OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_EMPTY_PATH | AT_RECURSIVE));
  if (tree < 0) return ErrnoError("open_tree " + path, errno);
  struct mount_attr attr;
  memset(&attr, 0, sizeof(attr));
  attr.attr_set = MOUNT_ATTR_IDMAP;
  attr.userns_fd = static_cast<uint64_t>(userns_fd);
  int r = static_cast<int>(syscall(SYS_mount_setattr, tree, "", AT_EMPTY_PATH | AT_RECURSIVE, &attr,
                                   sizeof(attr)));
  int err = errno;
  close(tree);
  if (r == 0) return OkStatus();
  struct statfs sf;
  std::ostringstream type;
  if (fstatfs(dir_fd, &sf) == 0) type << " (filesystem type 0x" << std::hex << sf.f_type << ")";
  return Error(ErrorCode::kFailedPrecondition,
               "shared folder " + path + ": its filesystem" + type.str() +
                   " cannot be idmapped (" + std::strerror(err) + "), so what the guest writes "
                   "there could not belong to the folder's owner",
               "share it read-only (`-v DIR:GUEST:ro`), move it to ext4, xfs, btrfs or tmpfs, or run "
               "cloister as the folder's owner rather than as root");
}

}  // namespace cloister::vm
