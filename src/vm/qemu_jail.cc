#include "vm/qemu_jail.h"

#include <grp.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <linux/seccomp.h>
#include <sys/socket.h>
#include <sys/utsname.h>

#include <cerrno>
#include <cstdio>
#include <algorithm>
#include <cstring>
#include <map>
#include <set>
#include <utility>

#include "protocol/contract.h"
#include "vm/share_git_config.h"
#include "vm/share_scan.h"
#include "vm/userns.h"

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

bool WriteAll(const char* path, const char* data) {
  int fd = open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  size_t n = strlen(data);
  bool ok = write(fd, data, n) == static_cast<ssize_t>(n);
  close(fd);
  return ok;
}

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

// Seccomp user notifications with SECCOMP_ADDFD_FLAG_SEND: Linux 5.14 and later.
bool GuardWorks() {
  struct utsname u;
  if (uname(&u) != 0) return false;
  int major = 0, minor = 0;
  if (sscanf(u.release, "%d.%d", &major, &minor) != 2) return false;
  seccomp_notif_sizes sizes{};
  return (major > 5 || (major == 5 && minor >= 14)) &&
         syscall(SYS_seccomp, SECCOMP_GET_NOTIF_SIZES, 0, &sizes) == 0;
}

}  // namespace

JailSupport ProbeJailSupport() {
  JailSupport s;
  s.landlock_abi = LandlockAbi();
  s.user_ns = geteuid() == 0 || UserNsWorks();
  s.guard = GuardWorks();
  s.detail = "Landlock " + (s.landlock_abi > 0 ? "ABI " + std::to_string(s.landlock_abi)
                                               : std::string("unavailable")) +
             ", unprivileged user namespaces that may mount " + (s.user_ns ? "available" : "unavailable") +
             ", seccomp user notifications that add fds " + (s.guard ? "available" : "unavailable");
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
  RETURN_IF_ERROR(jail->PrepareIdentity(spec));
  RETURN_IF_ERROR(jail->PrepareShares(spec));
  if (!jail->user_ns_ && !spec.identity.drop) {  // fail closed: QEMU would stay root
    return Error(ErrorCode::kInvalidArgument, "jail: as root, QEMU needs an identity to drop to");
  }
  if (!jail->guard_.git_dirs.empty()) {
    if (!support.guard) {
      return Error(ErrorCode::kFailedPrecondition,
                   "cannot guard a read-write shared folder on this kernel (" + support.detail + ")",
                   "share folders read-only (`-v DIR:GUEST:ro`), or use Linux 5.14 or later");
    }
    jail->guard_filter_ = ShareGuardFilter();
    if (jail->guard_filter_.empty()) return Error(ErrorCode::kInternal, "share guard: bad filter");
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, jail->guard_sock_) != 0) {
      return ErrnoError("socketpair", errno);
    }
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

// Who QEMU is inside its user namespace: the guest's user (issue 38).
Status QemuJail::PrepareIdentity(const JailSpec& spec) {
  const std::string guest_uid = std::to_string(protocol::kGuestUid);
  const std::string guest_gid = std::to_string(protocol::kGuestGid);
  if (user_ns_) {  // a non-root caller maps its own ids, which an unprivileged namespace may
    uid_map_ = guest_uid + " " + std::to_string(getuid()) + " 1\n";
    gid_map_ = guest_gid + " " + std::to_string(getgid()) + " 1\n";
    return OkStatus();
  }
  if (!spec.identity.drop) return OkStatus();  // refused by Prepare once the shares are checked
  const QemuIdentity& id = spec.identity;
  std::string gid_map = guest_gid + " " + std::to_string(id.gid) + " 1\n";
  for (gid_t g : id.groups) {  // kvm keeps its number inside
    if (g == protocol::kGuestGid || g == id.gid) {
      return Error(ErrorCode::kFailedPrecondition, "group " + std::to_string(g) + " (for QEMU) has the "
                   "guest user's or QEMU's own gid", "renumber the host's kvm group");
    }
    gid_map += std::to_string(g) + " " + std::to_string(g) + " 1\n";
    inside_groups_.push_back(g);
  }
  ASSIGN_OR_RETURN(qemu_userns_fd_,
                   MakeUserNamespace(guest_uid + " " + std::to_string(id.uid) + " 1\n", gid_map));
  inside_uid_ = protocol::kGuestUid;
  inside_gid_ = protocol::kGuestGid;
  guard_.uid = id.uid;
  guard_.gid = id.gid;
  return OkStatus();
}

Status QemuJail::PrepareShares(const JailSpec& spec) {
  shares_ = spec.shares;
  std::map<std::pair<uid_t, gid_t>, int> idmaps;  // one namespace per owner
  std::vector<std::unique_ptr<ShareScan>> scans(spec.shares.size());
  std::vector<int> fds;  // closed on every return
  struct CloseAll {
    std::vector<int>* fds;
    ~CloseAll() {
      for (int fd : *fds) close(fd);
    }
  } close_all{&fds};
  std::vector<uid_t> owners;
  for (size_t i = 0; i < spec.shares.size(); ++i) {
    const JailShare& share = spec.shares[i];
    if (share.host_path.empty() || share.host_path[0] != '/' || share.fd < 0) {
      return Error(ErrorCode::kInvalidArgument, "jail: share '" + share.host_path + "' needs an absolute path and an fd");
    }
    int fd = open(share.host_path.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return ErrnoError("open shared folder " + share.host_path, errno);
    fds.push_back(fd);
    int idmap = -1;
    struct stat st;
    if (fstat(fd, &st) != 0) return ErrnoError("stat " + share.host_path, errno);
    if (!share.read_only) owners.push_back(st.st_uid);
    if (qemu_userns_fd_ >= 0) {
      // As root: the folder's owner and group become QEMU's uid and gid on this mount.
      auto key = std::make_pair(st.st_uid, st.st_gid);
      auto made = idmaps.find(key);
      if (made == idmaps.end()) {
        // An idmapped mount shows an on-disk id as the namespace maps it from inside to outside.
        ASSIGN_OR_RETURN(int ns, MakeUserNamespace(std::to_string(st.st_uid) + " " + std::to_string(*guard_.uid) + " 1\n",
                                                   std::to_string(st.st_gid) + " " + std::to_string(*guard_.gid) + " 1\n"));
        made = idmaps.emplace(key, ns).first;
      }
      Status ok = CheckIdmappable(fd, made->second, share.host_path);
      if (ok.ok()) idmap = made->second;
      else if (!share.read_only) return ok;  // read-only: served unmapped
    }
    idmap_fds_.push_back(idmap);
    if (share.read_only) continue;
    ASSIGN_OR_RETURN(ShareScan scan, ScanShare(share.host_path, fd));
    scans[i] = std::make_unique<ShareScan>(std::move(scan));
  }
  // What host git's configuration names in the read-write shares (vm/share_git_config.h).
  std::vector<GitConfigShare> config_shares;
  for (size_t i = 0; i < spec.shares.size(); ++i) {
    config_shares.push_back({spec.shares[i].host_path, fds[i], spec.shares[i].read_only, scans[i].get()});
  }
  std::vector<GitConfigProtection> config(spec.shares.size());
  if (std::any_of(scans.begin(), scans.end(), [](const auto& s) { return s != nullptr; })) {
    ASSIGN_OR_RETURN(config, ProtectGitConfigPaths(config_shares, HostGitScope(FindHostGit().value_or(""), owners)));
  }
  for (size_t i = 0; i < spec.shares.size(); ++i) {
    const JailShare& share = spec.shares[i];
    targets_.push_back({i, "", true, share.read_only});
    mounts_.push_back({share.host_path, "", true, share.read_only, idmap_fds_[i] >= 0});
    if (!scans[i]) {
      guard_.git_dirs.emplace_back();
      guard_.protected_paths.emplace_back();
      continue;
    }
    std::vector<ShareMountTarget> targets = scans[i]->targets;
    targets.insert(targets.end(), config[i].targets.begin(), config[i].targets.end());
    for (const ShareMountTarget& t : targets) {
      targets_.push_back({i, t.relative, t.directory, t.read_only});
      mounts_.push_back({share.host_path, t.relative, t.directory, t.read_only, false});
    }
    guard_.git_dirs.push_back(std::move(scans[i]->git_dirs));
    guard_.protected_paths.push_back(std::move(config[i].guarded));
  }
  // Idmapping namespaces outlive Prepare through idmap_fds_ (several shares may hold one).
  if (std::all_of(scans.begin(), scans.end(), [](const auto& s) { return s == nullptr; })) {
    guard_.git_dirs.clear();
    guard_.protected_paths.clear();
  }
  return OkStatus();
}

QemuJail::~QemuJail() {
  if (ruleset_fd_ >= 0) close(ruleset_fd_);
  if (qemu_userns_fd_ >= 0) close(qemu_userns_fd_);
  std::set<int> idmaps(idmap_fds_.begin(), idmap_fds_.end());
  for (int fd : idmaps) {
    if (fd >= 0) close(fd);
  }
  for (int fd : guard_sock_) {
    if (fd >= 0) close(fd);
  }
}

Status QemuJail::StartGuard(pid_t qemu) {
  if (guard_sock_[0] < 0) return OkStatus();
  close(guard_sock_[1]);  // the child's end: recvmsg sees EOF if the child dies before sending
  guard_sock_[1] = -1;
  int sock = guard_sock_[0];
  guard_sock_[0] = -1;
  ShareGuardConfig config = guard_;
  config.qemu = qemu;
  return StartShareGuard(sock, config);
}

const char* QemuJail::StepName(int step) {
  switch (step) {
    case 1: return "cloister jail: unshare failed\n";
    case 2: return "cloister jail: user namespace maps failed\n";
    case 3: return "cloister jail: making mounts private failed\n";
    case 4: return "cloister jail: opening a shared folder failed\n";
    case 5: return "cloister jail: a protected path in a shared folder is missing, a symlink or changed type\n";
    case 6: return "cloister jail: a bind in a shared folder failed\n";
    case 7: return "cloister jail: reopening a shared folder in the namespace failed\n";
    case 8: return "cloister jail: covering /tmp or /run failed\n";
    case 9: return "cloister jail: landlock_restrict_self failed\n";
    case 10: return "cloister jail: installing the share guard failed\n";
    case 11: return "cloister jail: entering QEMU's user namespace or dropping to its uid failed\n";
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
    if (int step = EnterShare(i, &t)) return step;
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
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return 9;
  if (int step = EnterGuard()) return step;
  if (ruleset_fd_ >= 0 && syscall(SYS_landlock_restrict_self, ruleset_fd_, 0) != 0) return 9;
  return EnterIdentity();
}

// One share: its own mount (read-only, idmapped as Prepare decided), then the targets inside it,
// then QEMU's fd for it reopened in the namespace.
int QemuJail::EnterShare(size_t i, size_t* next) const {
  const JailShare& share = shares_[i];
  for (; *next < targets_.size() && targets_[*next].share == i; ++*next) {
    const Target& target = targets_[*next];
    // Reopened per target: after the share's own mount, paths resolve in it.
    int root = open(share.host_path.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (root < 0) return 4;
    int fd = target.relative.empty() ? dup(root) : OpenBeneath(root, target.relative.c_str());
    close(root);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0 || S_ISDIR(st.st_mode) != target.directory ||
        (!target.directory && !S_ISREG(st.st_mode))) {
      if (fd >= 0) close(fd);
      return 5;
    }
    int tree = open_tree(fd, "", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_EMPTY_PATH | AT_RECURSIVE);
    bool ok = tree >= 0;
    struct mount_attr attr;
    memset(&attr, 0, sizeof(attr));
    if (target.read_only) attr.attr_set |= MOUNT_ATTR_RDONLY;
    if (target.relative.empty() && idmap_fds_[i] >= 0) {
      attr.attr_set |= MOUNT_ATTR_IDMAP;
      attr.userns_fd = static_cast<uint64_t>(idmap_fds_[i]);
    }
    if (ok && attr.attr_set != 0) {
      // The share itself: everything below too; a git path: its top only (the pins cloned inside
      // it stay writable).
      ok = mount_setattr(tree, "", AT_EMPTY_PATH | (target.relative.empty() ? AT_RECURSIVE : 0),
                         &attr, sizeof(attr)) == 0;
    }
    ok = ok && move_mount(tree, "", fd, "", MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH) == 0;
    if (tree >= 0) close(tree);
    close(fd);
    if (!ok) return 6;
  }
  int view = open(share.host_path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (view < 0) return 7;
  if (view != share.fd) {
    if (dup2(view, share.fd) < 0) return 7;  // dup2 leaves the new fd inheritable
    close(view);
  } else if (fcntl(view, F_SETFD, 0) != 0) {
    return 7;
  }
  return 0;
}

// The share guard's filter, and its listener with the shares' fds sent to the supervisor.
int QemuJail::EnterGuard() const {
  if (guard_filter_.empty()) return 0;
  struct sock_fprog prog;
  prog.len = static_cast<unsigned short>(guard_filter_.size());
  prog.filter = const_cast<sock_filter*>(guard_filter_.data());
  // Once the guard has a call, only a fatal signal ends QEMU's wait (5.19+): an interrupted and
  // restarted call would be made twice.
  int listener = static_cast<int>(syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER,
                                          SECCOMP_FILTER_FLAG_NEW_LISTENER | SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV,
                                          &prog));
  if (listener < 0 && errno == EINVAL) {
    listener = static_cast<int>(syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_NEW_LISTENER, &prog));
  }
  if (listener < 0) return 10;
  constexpr size_t kMax = 65;
  int fds[kMax];
  size_t n = 0;
  fds[n++] = listener;
  for (const JailShare& share : shares_) {
    if (n == kMax) return 10;
    fds[n++] = share.fd;
  }
  char byte = 'g';
  iovec iov{&byte, 1};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(fds))];
  memset(control, 0, sizeof(control));
  msghdr msg;
  memset(&msg, 0, sizeof(msg));
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = CMSG_SPACE(n * sizeof(int));
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(n * sizeof(int));
  memcpy(CMSG_DATA(c), fds, n * sizeof(int));
  bool sent = sendmsg(guard_sock_[1], &msg, MSG_NOSIGNAL) == 1;
  close(listener);  // QEMU never holds it: it could answer its own calls
  return sent ? 0 : 10;
}

// As root: into QEMU's user namespace, then down to the guest user's ids there (QEMU's own uid on
// the host). The setns gives this process every capability in that namespace until the drop.
int QemuJail::EnterIdentity() const {
  if (qemu_userns_fd_ < 0) return 0;
  if (setns(qemu_userns_fd_, CLONE_NEWUSER) != 0) return 11;
  if (setgroups(inside_groups_.size(), inside_groups_.empty() ? nullptr : inside_groups_.data()) != 0 ||
      setresgid(inside_gid_, inside_gid_, inside_gid_) != 0 ||
      setresuid(inside_uid_, inside_uid_, inside_uid_) != 0) {
    return 11;
  }
  return 0;
}

}  // namespace cloister::vm
