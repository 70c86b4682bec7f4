#include "vm/qemu_jail.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <functional>
#include <tuple>

namespace cloister::vm {
namespace {

// Landlock's uapi, spelled out: the build hosts' linux-libc-dev predates ABI 4-6.
struct LandlockRulesetAttr {
  uint64_t handled_access_fs;
  uint64_t handled_access_net;
  uint64_t scoped;
};
struct __attribute__((packed)) LandlockPathBeneathAttr {
  uint64_t allowed_access;
  int32_t parent_fd;
};
constexpr uint32_t kLandlockCreateRulesetVersion = 1u << 0;
constexpr int kLandlockRulePathBeneath = 1;
constexpr uint64_t kFsExecute = 1ull << 0;
constexpr uint64_t kFsWriteFile = 1ull << 1;
constexpr uint64_t kFsReadFile = 1ull << 2;
constexpr uint64_t kFsReadDir = 1ull << 3;
constexpr uint64_t kFsTruncate = 1ull << 14;   // ABI 3
constexpr uint64_t kFsIoctlDev = 1ull << 15;   // ABI 5
constexpr uint64_t kFileRights = kFsExecute | kFsWriteFile | kFsReadFile | kFsTruncate | kFsIoctlDev;
constexpr uint64_t kNetBindTcp = 1ull << 0;    // ABI 4
constexpr uint64_t kNetConnectTcp = 1ull << 1;
constexpr uint64_t kScopeAbstractUnix = 1ull << 0;  // ABI 6
constexpr uint64_t kScopeSignal = 1ull << 1;

int LandlockAbi() {
  long v = syscall(SYS_landlock_create_ruleset, nullptr, 0, kLandlockCreateRulesetVersion);
  return v < 0 ? 0 : static_cast<int>(v);
}

// Every filesystem right the running kernel's Landlock knows.
uint64_t FsRightsFor(int abi) {
  uint64_t all = (1ull << 13) - 1;  // ABI 1: EXECUTE .. MAKE_SYM
  if (abi >= 2) all |= 1ull << 13;  // REFER
  if (abi >= 3) all |= kFsTruncate;
  if (abi >= 5) all |= kFsIoctlDev;
  return all;
}

bool WriteAll(const char* path, const char* data);

// What Enter() needs of a user namespace: made, mapped, and able to change mounts (an LSM such as
// Ubuntu's AppArmor userns restriction lets the unshare succeed but takes the capabilities).
bool UserNsWorks() {
  std::string uid_map = std::to_string(getuid()) + " " + std::to_string(getuid()) + " 1\n";
  std::string gid_map = std::to_string(getgid()) + " " + std::to_string(getgid()) + " 1\n";
  pid_t pid = fork();
  if (pid < 0) return false;
  if (pid == 0) {
    bool ok = unshare(CLONE_NEWUSER | CLONE_NEWNS) == 0 && WriteAll("/proc/self/setgroups", "deny") &&
              WriteAll("/proc/self/uid_map", uid_map.c_str()) &&
              WriteAll("/proc/self/gid_map", gid_map.c_str()) &&
              mount(nullptr, "/", nullptr, MS_REC | MS_SLAVE, nullptr) == 0;
    _exit(ok ? 0 : 1);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

int OpenBeneath(int root, const char* rel) {
  struct open_how how;
  memset(&how, 0, sizeof(how));
  how.flags = O_PATH | O_CLOEXEC | O_NOFOLLOW;
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
  return static_cast<int>(syscall(SYS_openat2, root, rel, &how, sizeof(how)));
}

bool WriteAll(const char* path, const char* data) {
  int fd = open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  size_t n = strlen(data);
  bool ok = write(fd, data, n) == static_cast<ssize_t>(n);
  close(fd);
  return ok;
}

Error Refuse(const std::string& share, const std::string& what) {
  return Error(ErrorCode::kFailedPrecondition, "shared folder " + share + ": " + what,
               "the guest may have planted it: inspect and fix it on the host, or share the folder "
               "read-only (`-v DIR:GUEST:ro`)");
}

// Walks a share's git dirs (Prepare). Every lookup is relative to an O_PATH fd and never follows a
// symlink: the share's contents are the guest's.
class GitDirWalker {
 public:
  GitDirWalker(const std::string& share, int share_fd, size_t share_index,
               std::vector<std::tuple<size_t, std::string, bool, bool>>* out)
      : share_(share), share_fd_(share_fd), index_(share_index), out_(out) {}

  // Post-order (what is inside a directory is mounted before the directory's own bind, which
  // clones it recursively).
  Status Protect(const std::string& gitdir, int depth) {
    if (depth > 4) return Refuse(share_, gitdir + ": git dirs nested deeper than 4 levels");
    RETURN_IF_ERROR(EnsureFile(gitdir + "/config", ""));
    RETURN_IF_ERROR(EnsureFile(gitdir + "/config.worktree", ""));
    // A commondir redirects where git reads config from; "." names the git dir itself (what git
    // assumes when there is none). An empty file would make git die, so it cannot be empty.
    RETURN_IF_ERROR(EnsureFile(gitdir + "/commondir", ".\n"));
    for (const char* d : {"hooks", "info"}) RETURN_IF_ERROR(EnsureDir(gitdir + "/" + d));
    for (const char* d : {"modules", "worktrees"}) {
      std::string sub = gitdir + "/" + d;
      RETURN_IF_ERROR(EnsureDir(sub, /*add=*/false));
      RETURN_IF_ERROR(Scan(sub, depth + 1));
      Add(sub, true, true);
    }
    Add(gitdir, true, false);  // the pin
    return OkStatus();
  }

  size_t count() const { return out_->size(); }

 private:
  // The git dirs below `dir` (modules/NAME may be nested: a submodule named a/b is modules/a/b).
  Status Scan(const std::string& dir, int depth) {
    if (depth > 4) return OkStatus();
    int fd = OpenBeneath(share_fd_, dir.c_str());
    if (fd < 0) return ErrnoError("open " + share_ + "/" + dir, errno);
    int dfd = openat(fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    close(fd);
    if (dfd < 0) return ErrnoError("open " + share_ + "/" + dir, errno);
    DIR* d = fdopendir(dfd);
    if (!d) {
      close(dfd);
      return ErrnoError("read " + share_ + "/" + dir, errno);
    }
    std::vector<std::string> names;
    while (dirent* e = readdir(d)) {
      std::string n = e->d_name;
      if (n != "." && n != "..") names.push_back(n);
    }
    closedir(d);
    std::sort(names.begin(), names.end());
    for (const std::string& n : names) {
      std::string child = dir + "/" + n;
      struct stat st;
      if (fstatat(share_fd_, child.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
      if (!S_ISDIR(st.st_mode)) continue;  // covered by the read-only parent
      if (out_->size() > 512) return Refuse(share_, "more than 512 git dirs to protect");
      struct stat head;
      if (fstatat(share_fd_, (child + "/HEAD").c_str(), &head, AT_SYMLINK_NOFOLLOW) == 0) {
        RETURN_IF_ERROR(Protect(child, depth));
      } else {
        RETURN_IF_ERROR(Scan(child, depth + 1));
      }
    }
    return OkStatus();
  }

  // Created missing, owned like the git dir's parent so the user can still remove it.
  Status EnsureFile(const std::string& rel, const std::string& content) {
    struct stat st;
    if (fstatat(share_fd_, rel.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) {
      if (!S_ISREG(st.st_mode)) return Refuse(share_, rel + " is not a regular file");
    } else {
      if (errno != ENOENT) return ErrnoError("stat " + share_ + "/" + rel, errno);
      ASSIGN_OR_RETURN(int parent, OpenParent(rel));
      int fd = openat(parent, Base(rel).c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                      0644);
      int err = errno;
      close(parent);
      if (fd < 0) return ErrnoError("create " + share_ + "/" + rel, err);
      bool ok = write(fd, content.data(), content.size()) == static_cast<ssize_t>(content.size());
      Chown(fd);
      close(fd);
      if (!ok) return ErrnoError("write " + share_ + "/" + rel, errno);
    }
    Add(rel, false, true);
    return OkStatus();
  }

  Status EnsureDir(const std::string& rel, bool add = true) {
    struct stat st;
    if (fstatat(share_fd_, rel.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) {
      if (!S_ISDIR(st.st_mode)) return Refuse(share_, rel + " is not a directory");
    } else {
      if (errno != ENOENT) return ErrnoError("stat " + share_ + "/" + rel, errno);
      ASSIGN_OR_RETURN(int parent, OpenParent(rel));
      int made = mkdirat(parent, Base(rel).c_str(), 0755);
      int err = errno;
      close(parent);
      if (made != 0) return ErrnoError("create " + share_ + "/" + rel, err);
      int fd = OpenBeneath(share_fd_, rel.c_str());
      if (fd >= 0) {
        Chown(fd);
        close(fd);
      }
    }
    if (add) Add(rel, true, true);
    return OkStatus();
  }

  // The directory holding `rel`, reached without following a symlink (a real directory the walk
  // already checked, unless something swapped it since: then this fails).
  Result<int> OpenParent(const std::string& rel) {
    std::string dir = rel.substr(0, rel.rfind('/'));
    int path = OpenBeneath(share_fd_, dir.c_str());
    if (path < 0) return Refuse(share_, dir + " is not a directory reached without symlinks");
    int fd = openat(path, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    int err = errno;
    close(path);
    if (fd < 0) return ErrnoError("open " + share_ + "/" + dir, err);
    return fd;
  }
  static std::string Base(const std::string& rel) { return rel.substr(rel.rfind('/') + 1); }

  void Chown(int fd) {
    struct stat owner;
    if (geteuid() == 0 && fstatat(share_fd_, ".git", &owner, AT_SYMLINK_NOFOLLOW) == 0) {
      (void)fchownat(fd, "", owner.st_uid, owner.st_gid, AT_EMPTY_PATH);
    }
  }

  void Add(const std::string& rel, bool dir, bool ro) { out_->emplace_back(index_, rel, dir, ro); }

  std::string share_;
  int share_fd_;
  size_t index_;
  std::vector<std::tuple<size_t, std::string, bool, bool>>* out_;
};

Status AddRule(int ruleset, const std::string& path, uint64_t rights, bool must_exist) {
  int fd = open(path.c_str(), O_PATH | O_CLOEXEC);
  if (fd < 0) {
    if (!must_exist && errno == ENOENT) return OkStatus();
    return ErrnoError("landlock: open " + path, errno);
  }
  struct stat st;
  if (fstat(fd, &st) == 0 && !S_ISDIR(st.st_mode)) rights &= kFileRights;
  LandlockPathBeneathAttr attr{rights, fd};
  long r = syscall(SYS_landlock_add_rule, ruleset, kLandlockRulePathBeneath, &attr, 0);
  int err = errno;
  close(fd);
  if (r != 0) return ErrnoError("landlock: rule for " + path, err);
  return OkStatus();
}

}  // namespace

JailSupport ProbeJailSupport() {
  JailSupport s;
  s.landlock_abi = LandlockAbi();
  s.user_ns = geteuid() == 0 || UserNsWorks();
  s.detail = "Landlock " + (s.landlock_abi > 0 ? "ABI " + std::to_string(s.landlock_abi)
                                               : std::string("unavailable")) +
             ", unprivileged user namespaces that may mount " + (s.user_ns ? "available" : "unavailable");
  return s;
}

Result<std::unique_ptr<QemuJail>> QemuJail::Prepare(const JailSpec& spec) {
  std::unique_ptr<QemuJail> jail(new QemuJail());
  jail->user_ns_ = geteuid() != 0;
  JailSupport support = ProbeJailSupport();
  if (jail->user_ns_ && (!support.user_ns || support.landlock_abi == 0)) {
    return Error(ErrorCode::kFailedPrecondition,
                 "cannot confine QEMU as a non-root user on this kernel (" + support.detail + ")",
                 "enable them (Landlock in the kernel's lsm= list, kernel.unprivileged_userns_clone=1 "
                 "or the distribution's equivalent), or run cloister as root");
  }
  if (jail->user_ns_) {
    jail->uid_map_ = std::to_string(getuid()) + " " + std::to_string(getuid()) + " 1\n";
    jail->gid_map_ = std::to_string(getgid()) + " " + std::to_string(getgid()) + " 1\n";
  }
  jail->shares_ = spec.shares;
  std::vector<std::tuple<size_t, std::string, bool, bool>> targets;
  for (size_t i = 0; i < spec.shares.size(); ++i) {
    const JailShare& share = spec.shares[i];
    if (share.host_path.empty() || share.host_path[0] != '/' || share.fd < 0) {
      return Error(ErrorCode::kInvalidArgument, "jail: share '" + share.host_path + "' needs an absolute path and an fd");
    }
    if (share.read_only) {
      targets.emplace_back(i, "", true, true);
      continue;
    }
    int fd = open(share.host_path.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return ErrnoError("open shared folder " + share.host_path, errno);
    struct stat st;
    Status status = OkStatus();
    if (fstatat(fd, ".git", &st, AT_SYMLINK_NOFOLLOW) == 0) {
      if (S_ISDIR(st.st_mode)) {
        GitDirWalker walker(share.host_path, fd, i, &targets);
        status = walker.Protect(".git", 0);
      } else if (S_ISREG(st.st_mode)) {
        targets.emplace_back(i, ".git", false, true);  // a gitdir: redirect, read-only
      } else {
        status = Refuse(share.host_path, ".git is neither a directory nor a regular file");
      }
    } else if (errno != ENOENT) {
      status = ErrnoError("stat " + share.host_path + "/.git", errno);
    }
    close(fd);
    RETURN_IF_ERROR(status);
  }
  for (const auto& [i, rel, dir, ro] : targets) {
    jail->targets_.push_back({i, rel, dir, ro});
    jail->mounts_.push_back({spec.shares[i].host_path, rel, dir, ro});
  }

  if (support.landlock_abi > 0) {
    uint64_t fs = FsRightsFor(support.landlock_abi);
    LandlockRulesetAttr attr{fs, 0, 0};
    if (support.landlock_abi >= 4) attr.handled_access_net = kNetBindTcp | kNetConnectTcp;
    if (support.landlock_abi >= 6) attr.scoped = kScopeAbstractUnix | kScopeSignal;
    long rs = syscall(SYS_landlock_create_ruleset, &attr, sizeof(attr), 0);
    if (rs < 0) return ErrnoError("landlock_create_ruleset", errno);
    jail->ruleset_fd_ = static_cast<int>(rs);
    int ruleset = jail->ruleset_fd_;
    const uint64_t read_exec = kFsExecute | kFsReadFile | kFsReadDir;
    // QEMU's program, libraries, ROMs and modules. Nothing under /usr is a secret.
    RETURN_IF_ERROR(AddRule(ruleset, "/usr", read_exec, true));
    for (const char* p : {"/lib", "/lib64", "/bin", "/sbin"}) {
      RETURN_IF_ERROR(AddRule(ruleset, p, read_exec, false));
    }
    RETURN_IF_ERROR(AddRule(ruleset, "/etc/ld.so.cache", kFsReadFile, false));
    RETURN_IF_ERROR(AddRule(ruleset, "/dev/null", kFsReadFile | kFsWriteFile, true));
    RETURN_IF_ERROR(AddRule(ruleset, "/dev/urandom", kFsReadFile, false));
    RETURN_IF_ERROR(AddRule(ruleset, "/dev/random", kFsReadFile, false));
    if (spec.kvm) {
      RETURN_IF_ERROR(AddRule(ruleset, "/dev/kvm", kFsReadFile | kFsWriteFile | (fs & kFsIoctlDev), true));
      // KVM's CPU and module parameters; not exercised here (no usable KVM on the build hosts).
      RETURN_IF_ERROR(AddRule(ruleset, "/sys", kFsReadFile | kFsReadDir, false));
    }
    for (const std::string& p : spec.extra_read_paths) RETURN_IF_ERROR(AddRule(ruleset, p, read_exec, true));
    for (const JailShare& share : spec.shares) {
      RETURN_IF_ERROR(AddRule(ruleset, share.host_path,
                              share.read_only ? (kFsReadFile | kFsReadDir) : fs, true));
    }
    for (int fd : spec.read_fds) {
      LandlockPathBeneathAttr a{kFsReadFile, fd};
      if (syscall(SYS_landlock_add_rule, ruleset, kLandlockRulePathBeneath, &a, 0) != 0 &&
          errno != EBADFD) {  // EBADFD: a memfd, which no path reaches and Landlock leaves alone
        return ErrnoError("landlock: rule for fd " + std::to_string(fd), errno);
      }
    }
  }
  return jail;
}

QemuJail::~QemuJail() {
  if (ruleset_fd_ >= 0) close(ruleset_fd_);
}

const char* QemuJail::StepName(int step) {
  switch (step) {
    case 1: return "cloister jail: unshare failed\n";
    case 2: return "cloister jail: user namespace maps failed\n";
    case 3: return "cloister jail: making mounts private failed\n";
    case 4: return "cloister jail: opening a shared folder failed\n";
    case 5: return "cloister jail: a protected path in a shared folder is missing, a symlink or changed type\n";
    case 6: return "cloister jail: a read-only bind in a shared folder failed\n";
    case 7: return "cloister jail: reopening a shared folder in the namespace failed\n";
    case 8: return "cloister jail: covering /tmp or /run failed\n";
    case 9: return "cloister jail: landlock_restrict_self failed\n";
    default: return "cloister jail: failed\n";
  }
}

// SECURITY: the forked child of a multithreaded supervisor: raw system calls only, no allocation.
int QemuJail::Enter() const {
  if (unshare(user_ns_ ? (CLONE_NEWUSER | CLONE_NEWNS) : CLONE_NEWNS) != 0) return 1;
  if (user_ns_) {
    if (!WriteAll("/proc/self/setgroups", "deny") || !WriteAll("/proc/self/uid_map", uid_map_.c_str()) ||
        !WriteAll("/proc/self/gid_map", gid_map_.c_str())) {
      return 2;
    }
  }
  if (mount(nullptr, "/", nullptr, MS_REC | MS_SLAVE, nullptr) != 0) return 3;
  size_t t = 0;
  for (size_t i = 0; i < shares_.size(); ++i) {
    const JailShare& share = shares_[i];
    int root = open(share.host_path.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (root < 0) return 4;
    for (; t < targets_.size() && targets_[t].share == i; ++t) {
      const Target& target = targets_[t];
      int fd = target.relative.empty() ? dup(root) : OpenBeneath(root, target.relative.c_str());
      struct stat st;
      if (fd < 0 || fstat(fd, &st) != 0 || S_ISDIR(st.st_mode) != target.directory ||
          (!target.directory && !S_ISREG(st.st_mode))) {
        if (fd >= 0) close(fd);
        close(root);
        return 5;
      }
      int tree = open_tree(fd, "", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_EMPTY_PATH | AT_RECURSIVE);
      bool ok = tree >= 0;
      if (ok && target.read_only) {
        struct mount_attr attr;
        memset(&attr, 0, sizeof(attr));
        attr.attr_set = MOUNT_ATTR_RDONLY;
        // A read-only share: everything below too; a git path: its top only (the pins cloned
        // inside it stay writable).
        ok = mount_setattr(tree, "", AT_EMPTY_PATH | (target.relative.empty() ? AT_RECURSIVE : 0),
                           &attr, sizeof(attr)) == 0;
      }
      ok = ok && move_mount(tree, "", fd, "", MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH) == 0;
      if (tree >= 0) close(tree);
      close(fd);
      if (!ok) {
        close(root);
        return 6;
      }
    }
    close(root);
    int view = open(share.host_path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (view < 0) return 7;
    if (view != share.fd) {
      if (dup2(view, share.fd) < 0) return 7;  // dup2 leaves the new fd inheritable
      close(view);
    } else if (fcntl(view, F_SETFD, 0) != 0) {
      return 7;
    }
  }
  // No path to a socket of the user's agents or daemons (SSH_AUTH_SOCK, D-Bus, docker.sock...):
  // Landlock restricts opening files, not connecting to a named socket.
  for (const char* dir : {"/tmp", "/var/tmp", "/run", "/dev/shm"}) {
    struct stat st;
    if (lstat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) continue;
    if (mount("cloister-empty", dir, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=64k,mode=0755") != 0) {
      return 8;
    }
  }
  if (ruleset_fd_ >= 0) {
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return 9;
    if (syscall(SYS_landlock_restrict_self, ruleset_fd_, 0) != 0) return 9;
  }
  return 0;
}

}  // namespace cloister::vm
