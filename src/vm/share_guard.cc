#include "vm/share_guard.h"

#include <fcntl.h>
#include <linux/audit.h>
#include <linux/capability.h>
#include <linux/seccomp.h>
#include <stdio.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <utility>
#include <set>
#include <sstream>
#include <thread>

#include "vm/share_policy.h"
#include "vm/share_protect.h"
#include "vm/share_scan.h"

#ifndef __NR_fchmodat2
#define __NR_fchmodat2 452
#endif

namespace cloister::vm {
namespace {

constexpr size_t kMaxShares = 64;
constexpr size_t kMaxString = 4096;

// An fd we own.
struct Fd {
  int fd = -1;
  Fd() = default;
  explicit Fd(int f) : fd(f) {}
  Fd(Fd&& o) noexcept : fd(o.fd) { o.fd = -1; }
  Fd& operator=(Fd&& o) noexcept {
    std::swap(fd, o.fd);
    return *this;
  }
  ~Fd() {
    if (fd >= 0) close(fd);
  }
};

uint64_t MountId(int fd, bool* mount_root = nullptr) {
  struct statx stx;
  if (statx(fd, "", AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW, STATX_MNT_ID, &stx) != 0 ||
      !(stx.stx_mask & STATX_MNT_ID)) {
    return 0;
  }
  if (mount_root) *mount_root = (stx.stx_attributes & STATX_ATTR_MOUNT_ROOT) != 0;
  return stx.stx_mnt_id;
}

// The mounts below (and including) `roots` in QEMU's mount table: "ID PARENT ..." per line.
std::set<uint64_t> Descendants(pid_t qemu, const std::set<uint64_t>& roots) {
  std::multimap<uint64_t, uint64_t> children;
  std::ifstream f("/proc/" + std::to_string(qemu) + "/mountinfo");
  for (std::string line; std::getline(f, line);) {
    std::istringstream words(line);
    uint64_t id = 0, parent = 0;
    if (words >> id >> parent) children.emplace(parent, id);
  }
  std::set<uint64_t> out;
  std::vector<uint64_t> pending(roots.begin(), roots.end());
  while (!pending.empty()) {
    uint64_t id = pending.back();
    pending.pop_back();
    if (!out.insert(id).second) continue;
    auto [b, e] = children.equal_range(id);
    for (auto it = b; it != e; ++it) pending.push_back(it->second);
  }
  return out;
}

struct Reply {
  int64_t val = 0;
  int error = 0;      // an errno, answered as -error
  int add_fd = -1;    // an fd to install in QEMU as the call's result (ours; closed after)
  uint32_t add_flags = 0;
};

Reply Errno(int e) { return Reply{0, e}; }
Reply FromCall(long r) { return r < 0 ? Errno(errno) : Reply{r, 0}; }

// One notified call, its arguments named (the *at forms; the others with AT_FDCWD).
struct Call {
  enum Op { kMkdir, kMknod, kSymlink, kLink, kRename, kOpen, kChmod, kOther } op = kOther;
  int dfd = AT_FDCWD, dfd2 = AT_FDCWD;
  uint64_t path = 0, path2 = 0, target = 0;  // addresses in QEMU
  bool has_path = true;                      // fchmod: the fd itself
  mode_t mode = 0;
  int flags = 0;
};

Call Decode(const seccomp_notif& req) {
  const auto& a = req.data.args;
  auto fd = [](uint64_t v) { return static_cast<int>(v); };
  auto mode = [](uint64_t v) { return static_cast<mode_t>(v); };
  Call c;
  switch (req.data.nr) {
    case __NR_mkdirat: c = {Call::kMkdir, fd(a[0]), AT_FDCWD, a[1], 0, 0, true, mode(a[2])}; break;
    case __NR_mkdir: c = {Call::kMkdir, AT_FDCWD, AT_FDCWD, a[0], 0, 0, true, mode(a[1])}; break;
    case __NR_mknodat: c = {Call::kMknod, fd(a[0]), AT_FDCWD, a[1], 0, 0, true, mode(a[2])}; break;
    case __NR_mknod: c = {Call::kMknod, AT_FDCWD, AT_FDCWD, a[0], 0, 0, true, mode(a[1])}; break;
    case __NR_symlinkat: c = {Call::kSymlink, fd(a[1]), AT_FDCWD, a[2], 0, a[0]}; break;
    case __NR_symlink: c = {Call::kSymlink, AT_FDCWD, AT_FDCWD, a[1], 0, a[0]}; break;
    case __NR_linkat: c = {Call::kLink, fd(a[0]), fd(a[2]), a[1], a[3], 0, true, 0, static_cast<int>(a[4])}; break;
    case __NR_link: c = {Call::kLink, AT_FDCWD, AT_FDCWD, a[0], a[1]}; break;
    case __NR_renameat: c = {Call::kRename, fd(a[0]), fd(a[2]), a[1], a[3]}; break;
    case __NR_renameat2: c = {Call::kRename, fd(a[0]), fd(a[2]), a[1], a[3], 0, true, 0, static_cast<int>(a[4])}; break;
    case __NR_rename: c = {Call::kRename, AT_FDCWD, AT_FDCWD, a[0], a[1]}; break;
    case __NR_openat: c = {Call::kOpen, fd(a[0]), AT_FDCWD, a[1], 0, 0, true, mode(a[3]), static_cast<int>(a[2])}; break;
    case __NR_open: c = {Call::kOpen, AT_FDCWD, AT_FDCWD, a[0], 0, 0, true, mode(a[2]), static_cast<int>(a[1])}; break;
    case __NR_creat: c = {Call::kOpen, AT_FDCWD, AT_FDCWD, a[0], 0, 0, true, mode(a[1]), O_CREAT | O_WRONLY | O_TRUNC}; break;
    case __NR_chmod: c = {Call::kChmod, AT_FDCWD, AT_FDCWD, a[0], 0, 0, true, mode(a[1])}; break;
    case __NR_fchmod: c = {Call::kChmod, fd(a[0]), AT_FDCWD, 0, 0, 0, false, mode(a[1])}; break;
    case __NR_fchmodat: c = {Call::kChmod, fd(a[0]), AT_FDCWD, a[1], 0, 0, true, mode(a[2])}; break;
    case __NR_fchmodat2: c = {Call::kChmod, fd(a[0]), AT_FDCWD, a[1], 0, 0, true, mode(a[2]), static_cast<int>(a[3])}; break;
    default: break;
  }
  return c;
}

// The thread group (process) of task `tid`: `qemu` when it is one of QEMU's threads (the usual
// case, one stat), else from /proc/TID/status (a process QEMU forked); -1 if gone.
pid_t ThreadGroup(pid_t qemu, pid_t tid) {
  struct stat st;
  if (stat(("/proc/" + std::to_string(qemu) + "/task/" + std::to_string(tid)).c_str(), &st) == 0) return qemu;
  std::ifstream f("/proc/" + std::to_string(tid) + "/status");
  for (std::string line; std::getline(f, line);) {
    if (line.rfind("Tgid:", 0) == 0) return static_cast<pid_t>(std::atoi(line.c_str() + 5));
  }
  return -1;
}

class Guard {
 public:
  Guard(const ShareGuardConfig& config, Fd listener, std::set<uint64_t> mounts, std::set<uint64_t> pins,
        ProtectedNames names)
      : config_(config),
        listener_(std::move(listener)),
        mounts_(std::move(mounts)),
        pins_(std::move(pins)),
        names_(std::move(names)) {}

  void Run() {
    // SECURITY: as root, this thread acts on files as QEMU's uid and gid, with no supplementary
    // group and no capability but CAP_SYS_PTRACE (to read QEMU's memory and fds across QEMU's
    // user namespace), for good. Raw calls: only this thread changes.
    if (config_.uid && config_.gid) {
      __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
      __user_cap_data_struct caps[2] = {};
      caps[CAP_TO_INDEX(CAP_SYS_PTRACE)].effective = CAP_TO_MASK(CAP_SYS_PTRACE);
      caps[CAP_TO_INDEX(CAP_SYS_PTRACE)].permitted = CAP_TO_MASK(CAP_SYS_PTRACE);
      syscall(SYS_setfsgid, *config_.gid);
      syscall(SYS_setfsuid, *config_.uid);
      if (syscall(SYS_setgroups, 0, nullptr) != 0 || syscall(SYS_setfsgid, -1) != static_cast<long>(*config_.gid) ||
          syscall(SYS_setfsuid, -1) != static_cast<long>(*config_.uid) || syscall(SYS_capset, &header, caps) != 0) {
        return;  // the listener closes: QEMU's notified calls fail
      }
    }
    seccomp_notif_sizes sizes{};
    if (syscall(SYS_seccomp, SECCOMP_GET_NOTIF_SIZES, 0, &sizes) != 0) return;
    std::vector<char> req_buf(std::max<size_t>(sizes.seccomp_notif, sizeof(seccomp_notif)));
    std::vector<char> resp_buf(std::max<size_t>(sizes.seccomp_notif_resp, sizeof(seccomp_notif_resp)));
    while (true) {
      pollfd p{listener_.fd, POLLIN, 0};
      if (poll(&p, 1, -1) < 0) {
        if (errno == EINTR) continue;
        return;
      }
      if (p.revents & (POLLHUP | POLLERR)) return;  // QEMU is gone
      memset(req_buf.data(), 0, req_buf.size());
      auto* req = reinterpret_cast<seccomp_notif*>(req_buf.data());
      if (ioctl(listener_.fd, SECCOMP_IOCTL_NOTIF_RECV, req) != 0) continue;
      Reply reply = Handle(*req);
      if (reply.add_fd >= 0) {
        seccomp_notif_addfd add{};
        add.id = req->id;
        add.flags = SECCOMP_ADDFD_FLAG_SEND;
        add.srcfd = static_cast<uint32_t>(reply.add_fd);
        add.newfd_flags = reply.add_flags;
        int r = ioctl(listener_.fd, SECCOMP_IOCTL_NOTIF_ADDFD, &add);
        int err = errno;
        close(reply.add_fd);
        if (r >= 0 || err == ENOENT) continue;
        reply = Errno(err == EMFILE ? EMFILE : EIO);
      }
      memset(resp_buf.data(), 0, resp_buf.size());
      auto* resp = reinterpret_cast<seccomp_notif_resp*>(resp_buf.data());
      resp->id = req->id;
      resp->val = reply.val;
      resp->error = reply.error ? -reply.error : 0;
      (void)ioctl(listener_.fd, SECCOMP_IOCTL_NOTIF_SEND, resp);
    }
  }

 private:
  // The directory holding a path's last component, on one of the share mounts, and that
  // component.
  struct Where {
    Fd dir;
    std::string name;
    NewNameContext context;
  };
  // The calling task: QEMU or a process it forked (the filter is inherited; both are in QEMU's
  // jail). Its fds, working directory and root, opened before the notification is checked valid.
  struct Task {
    pid_t tid = -1, tgid = -1;
    Fd pidfd, cwd, root;
  };

  // A NUL-terminated string at `addr` in the calling thread (at most 4096 bytes with the NUL).
  // SECURITY: guest-chosen bytes; read once, bounded. Read through /proc/TID/mem opened now: the
  // task is stopped in the call, so that is its memory (checked with ID_VALID after).
  int ReadString(int mem, uint64_t addr, std::string* out) {
    out->clear();
    char buf[256];
    while (out->size() < kMaxString) {
      size_t page_left = static_cast<size_t>(4096 - (addr % 4096));
      size_t want = std::min({sizeof(buf), page_left, kMaxString - out->size()});
      ssize_t n = pread(mem, buf, want, static_cast<off_t>(addr));
      if (n <= 0) return EFAULT;
      const char* nul = static_cast<const char*>(memchr(buf, 0, static_cast<size_t>(n)));
      if (nul) {
        out->append(buf, static_cast<size_t>(nul - buf));
        return 0;
      }
      out->append(buf, static_cast<size_t>(n));
      addr += static_cast<uint64_t>(n);
    }
    return ENAMETOOLONG;
  }

  // `fd` (ours) is on a share mount; its context for new names there.
  bool OnShare(int fd, NewNameContext* context = nullptr) {
    bool root = false;
    uint64_t mnt = MountId(fd, &root);
    if (mnt == 0 || !mounts_.count(mnt)) return false;
    if (context) {
      context->in_git_dir = pins_.count(mnt) > 0;
      context->git_dir_top = context->in_git_dir && root;
    }
    return true;
  }

  // QEMU's fd `qfd` as ours (pidfd_getfd), on a share mount.
  int GetShareFd(const Task& task, int qfd, Fd* out) {
    if (qfd < 0) return EPERM;
    Fd fd(static_cast<int>(syscall(SYS_pidfd_getfd, task.pidfd.fd, qfd, 0)));
    if (fd.fd < 0) return errno == EBADF ? EBADF : EPERM;
    if (!OnShare(fd.fd)) return EPERM;
    *out = std::move(fd);
    return 0;
  }

  // Where (dfd, path) points for `task`: the path's directory is looked up from its fd, working
  // directory or root (all in QEMU's mount namespace), as the kernel would for it, and must end
  // on a share mount; the last component is returned unresolved.
  int Resolve(const Task& task, int dfd, const std::string& path, Where* w) {
    std::string p = path;
    // "self" would name this process: the task's own entries instead.
    for (auto [self, who] : {std::pair{"/proc/self/", task.tgid}, std::pair{"/proc/thread-self/", task.tid}}) {
      if (p.rfind(self, 0) == 0) p = "/proc/" + std::to_string(who) + "/" + p.substr(strlen(self));
    }
    while (p.size() > 1 && p.back() == '/') p.pop_back();
    size_t slash = p.rfind('/');
    std::string parent = slash == std::string::npos ? "" : p.substr(0, slash);
    w->name = slash == std::string::npos ? p : p.substr(slash + 1);
    if (!IsOneComponent(w->name)) return EPERM;
    Fd base;
    if (!p.empty() && p[0] == '/') {
      base = Fd(task.root.fd >= 0 ? dup(task.root.fd) : -1);
      while (!parent.empty() && parent[0] == '/') parent.erase(0, 1);
    } else if (dfd == AT_FDCWD) {
      base = Fd(task.cwd.fd >= 0 ? dup(task.cwd.fd) : -1);
    } else {
      if (dfd < 0) return EBADF;
      base = Fd(static_cast<int>(syscall(SYS_pidfd_getfd, task.pidfd.fd, dfd, 0)));
    }
    if (base.fd < 0) return errno == EBADF ? EBADF : EPERM;
    if (parent.empty()) {
      w->dir = std::move(base);
    } else {
      w->dir = Fd(openat(base.fd, parent.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
      if (w->dir.fd < 0) return errno;
    }
    return OnShare(w->dir.fd, &w->context) ? 0 : EPERM;
  }

  // Whether a mount sits on `w.name` in QEMU's namespace (lookups from QEMU's mounts cross its
  // mounts). Renames are served one at a time, so no other rename moves one there meanwhile.
  static bool IsMountPoint(const Where& w) {
    Fd fd(openat(w.dir.fd, w.name.c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC));
    if (fd.fd < 0) return false;
    bool root = false;
    return MountId(fd.fd, &root) != 0 && root;
  }

  // The new name may be made where it lands (vm/share_policy.h), and is no path host git's
  // configuration names nor on the way to one but as a directory (vm/share_protect.h).
  int Allowed(const Where& w, bool mkdir = false) const {
    if (int e = CheckNewName(w.name, w.context, [&] {
          struct stat st;
          return fstatat(w.dir.fd, "HEAD", &st, AT_SYMLINK_NOFOLLOW) == 0;
        })) {
      return e;
    }
    if (names_.empty()) return 0;
    struct stat dir;
    if (fstat(w.dir.fd, &dir) != 0) return EPERM;
    return names_.Check({dir.st_dev, dir.st_ino}, w.name, mkdir);
  }

  // A directory made: it carries the rest of any protected path through its name.
  Reply Mkdir(const Where& w, mode_t mode) {
    if (mkdirat(w.dir.fd, w.name.c_str(), mode) != 0) return Errno(errno);
    if (names_.empty()) return Reply{};
    struct stat dir, made;
    if (fstat(w.dir.fd, &dir) != 0 || fstatat(w.dir.fd, w.name.c_str(), &made, AT_SYMLINK_NOFOLLOW) != 0 ||
        !S_ISDIR(made.st_mode)) {
      // Served one at a time: nothing QEMU does moves it meanwhile but rmdir; undo if unsure.
      unlinkat(w.dir.fd, w.name.c_str(), AT_REMOVEDIR);
      return Errno(EIO);
    }
    names_.Made({dir.st_dev, dir.st_ino}, w.name, {made.st_dev, made.st_ino});
    return Reply{};
  }

  Reply Handle(const seccomp_notif& req) {
    if (req.data.arch != AUDIT_ARCH_X86_64) return Errno(EPERM);
    Call c = Decode(req);
    if (c.op == Call::kOther) return Errno(EPERM);
    // Every string first, from the task's memory, and its fd table, cwd and root; then the check
    // that the task is still in this call (so all of that was its own).
    const std::string proc = "/proc/" + std::to_string(req.pid);
    Fd mem(open((proc + "/mem").c_str(), O_RDONLY | O_CLOEXEC));
    if (mem.fd < 0) return Errno(EPERM);
    std::string path, path2, target;
    if (c.has_path) {
      if (int e = ReadString(mem.fd, c.path, &path)) return Errno(e);
    }
    if (c.op == Call::kLink || c.op == Call::kRename) {
      if (int e = ReadString(mem.fd, c.path2, &path2)) return Errno(e);
    }
    if (c.op == Call::kSymlink) {
      if (int e = ReadString(mem.fd, c.target, &target)) return Errno(e);
    }
    Task task;
    task.tid = static_cast<pid_t>(req.pid);
    task.tgid = ThreadGroup(config_.qemu, task.tid);
    if (task.tgid > 0) task.pidfd = Fd(static_cast<int>(syscall(SYS_pidfd_open, task.tgid, 0)));
    if (task.pidfd.fd < 0) return Errno(EPERM);
    // Its working directory and root, when a path needs them (QEMU's 9p server names a
    // directory fd and one component: neither).
    auto relative = [](int dfd, const std::string& p) { return dfd == AT_FDCWD && !p.empty() && p[0] != '/'; };
    auto absolute = [](const std::string& p) { return !p.empty() && p[0] == '/'; };
    if (relative(c.dfd, path) || relative(c.dfd2, path2)) {
      task.cwd = Fd(open((proc + "/cwd").c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
      if (task.cwd.fd < 0) return Errno(EPERM);
    }
    if (absolute(path) || absolute(path2)) {
      task.root = Fd(open((proc + "/root").c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
      if (task.root.fd < 0) return Errno(EPERM);
    }
    uint64_t id = req.id;
    if (ioctl(listener_.fd, SECCOMP_IOCTL_NOTIF_ID_VALID, &id) != 0) return Errno(ESRCH);
    if (c.op == Call::kChmod) return Chmod(task, c, path);
    Where w, w2;
    const bool exchange = c.op == Call::kRename && (c.flags & RENAME_EXCHANGE);
    if (int e = Resolve(task, c.dfd, path, &w)) return Errno(e);
    if (c.op != Call::kLink && c.op != Call::kRename && c.op != Call::kOpen) {
      if (int e = Allowed(w, c.op == Call::kMkdir)) return Errno(e);
    }
    switch (c.op) {
      case Call::kMkdir:
        return Mkdir(w, c.mode);
      case Call::kMknod: {
        mode_t type = c.mode & S_IFMT;
        if ((type != 0 && type != S_IFREG && type != S_IFIFO && type != S_IFSOCK) || (c.mode & (S_ISUID | S_ISGID))) {
          return Errno(EPERM);
        }
        return FromCall(mknodat(w.dir.fd, w.name.c_str(), c.mode, 0));
      }
      case Call::kSymlink:
        return FromCall(symlinkat(target.c_str(), w.dir.fd, w.name.c_str()));
      case Call::kLink:
      case Call::kRename: {
        if (c.op == Call::kLink && c.flags != 0) return Errno(EPERM);  // no AT_SYMLINK_FOLLOW, AT_EMPTY_PATH
        if (c.op == Call::kRename && (c.flags & ~(RENAME_NOREPLACE | RENAME_EXCHANGE))) return Errno(EPERM);
        if (exchange) {
          if (int e = Allowed(w)) return Errno(e);
        }
        if (int e = Resolve(task, c.dfd2, path2, &w2)) return Errno(e);
        if (int e = Allowed(w2)) return Errno(e);
        // The kernel refuses renaming a mount point of the caller's own namespace only; these
        // are QEMU's (the pins and read-only binds), so ask here, as QEMU's rename would.
        if (c.op == Call::kRename && (IsMountPoint(w) || IsMountPoint(w2))) return Errno(EBUSY);
        if (c.op == Call::kLink) return FromCall(linkat(w.dir.fd, w.name.c_str(), w2.dir.fd, w2.name.c_str(), 0));
        return FromCall(syscall(SYS_renameat2, w.dir.fd, w.name.c_str(), w2.dir.fd, w2.name.c_str(),
                                static_cast<unsigned>(c.flags)));
      }
      case Call::kOpen: {
        if (c.mode & (S_ISUID | S_ISGID)) return Errno(EPERM);
        // An existing file opened with O_CREAT is no new name, but may become one by the time
        // the kernel looks: checked as new either way.
        if (int e = Allowed(w)) return Errno(e);
        int fd = openat(w.dir.fd, w.name.c_str(), c.flags | O_NOFOLLOW | O_CLOEXEC, c.mode);
        if (fd < 0) return Errno(errno);
        Reply r;
        r.add_fd = fd;
        r.add_flags = (c.flags & O_CLOEXEC) ? O_CLOEXEC : 0;
        return r;
      }
      default:
        return Errno(EPERM);
    }
  }

  // A set-group-ID mode reaches here (the filter refuses set-user-ID): served for a directory on
  // a share mount only, never through a symlink. The target is QEMU's fd (fchmod, or an empty
  // path with AT_EMPTY_PATH), "/proc/self/fd/N" (how QEMU's 9p server changes a mode), or a path.
  Reply Chmod(const Task& task, const Call& c, const std::string& path) {
    Fd target;
    const std::string self = "/proc/self/fd/";
    if (c.has_path && path.rfind(self, 0) == 0) {
      int n = -1;
      const char* end = path.data() + path.size();
      auto [at, ec] = std::from_chars(path.data() + self.size(), end, n);
      if (ec != std::errc() || at != end || n < 0) return Errno(EPERM);
      if (int e = GetShareFd(task, n, &target)) return Errno(e);
    } else if (!c.has_path || (path.empty() && (c.flags & AT_EMPTY_PATH))) {
      if (int e = GetShareFd(task, c.dfd, &target)) return Errno(e);
    } else {
      Where w;
      if (int e = Resolve(task, c.dfd, path, &w)) return Errno(e);
      target = Fd(openat(w.dir.fd, w.name.c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC));
      if (target.fd < 0) return Errno(errno);
    }
    struct stat st;
    if (fstat(target.fd, &st) != 0) return Errno(errno);
    if (!S_ISDIR(st.st_mode)) return Errno(EPERM);
    std::string ours = "/proc/self/fd/" + std::to_string(target.fd);
    return FromCall(chmod(ours.c_str(), c.mode));
  }

  ShareGuardConfig config_;
  Fd listener_;
  std::set<uint64_t> mounts_;  // every mount of the shares in QEMU's namespace
  std::set<uint64_t> pins_;    // the git dirs' mounts
  ProtectedNames names_;       // what host git's configuration names
};

// The protected paths of share `view`, each from the share's top down as far as it exists.
Status AddProtected(int view, const std::vector<std::string>& paths, ProtectedNames* names) {
  struct stat st;
  if (fstat(view, &st) != 0) return ErrnoError("share guard: stat a share", errno);
  const DirId top{st.st_dev, st.st_ino};
  for (const std::string& rel : paths) {
    std::vector<std::string> parts;
    for (size_t at = 0; at <= rel.size();) {
      size_t slash = rel.find('/', at);
      if (slash == std::string::npos) slash = rel.size();
      parts.push_back(rel.substr(at, slash - at));
      at = slash + 1;
    }
    for (const std::string& part : parts) {
      if (!IsOneComponent(part)) return Error(ErrorCode::kInternal, "share guard: bad protected path " + rel);
    }
    names->Add(top, parts);
    DirId dir = top;
    Fd at(dup(view));
    for (size_t i = 0; i + 1 < parts.size() && at.fd >= 0; ++i) {
      Fd next(openat(at.fd, parts[i].c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
      if (next.fd < 0 || fstat(next.fd, &st) != 0) break;
      names->Made(dir, parts[i], {st.st_dev, st.st_ino});
      dir = {st.st_dev, st.st_ino};
      at = std::move(next);
    }
  }
  return OkStatus();
}

// The listener, then one directory fd per share, in one message.
Status ReceiveFds(int sock, size_t shares, Fd* listener, std::vector<Fd>* views) {
  pollfd p{sock, POLLIN, 0};
  int ready = poll(&p, 1, 60000);
  if (ready <= 0) return Error(ErrorCode::kUnavailable, "share guard: QEMU's jail sent nothing");
  char byte;
  iovec iov{&byte, 1};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * (kMaxShares + 1))];
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  ssize_t n = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
  if (n <= 0) {
    return Error(ErrorCode::kUnavailable, "share guard: QEMU's jail failed before exec",
                 "the supervisor's log says which step");
  }
  std::vector<int> fds;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count; ++i) {
      int fd;
      memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
      fds.push_back(fd);
    }
  }
  std::vector<Fd> owned;
  for (int fd : fds) owned.emplace_back(fd);
  if ((msg.msg_flags & MSG_CTRUNC) || owned.size() != shares + 1) {
    return Error(ErrorCode::kInternal, "share guard: expected " + std::to_string(shares + 1) +
                                           " fds from QEMU's jail, got " + std::to_string(owned.size()));
  }
  *listener = std::move(owned[0]);
  for (size_t i = 1; i < owned.size(); ++i) views->push_back(std::move(owned[i]));
  return OkStatus();
}

}  // namespace

Status StartShareGuard(int sock_fd, const ShareGuardConfig& config) {
  Fd sock(sock_fd);
  if (config.git_dirs.size() > kMaxShares) return Error(ErrorCode::kInvalidArgument, "share guard: too many shares");
  Fd listener;
  std::vector<Fd> views;
  RETURN_IF_ERROR(ReceiveFds(sock.fd, config.git_dirs.size(), &listener, &views));
  std::set<uint64_t> roots, pins;
  ProtectedNames names;
  for (size_t i = 0; i < views.size(); ++i) {
    if (i < config.protected_paths.size()) RETURN_IF_ERROR(AddProtected(views[i].fd, config.protected_paths[i], &names));
    uint64_t root = MountId(views[i].fd);
    if (root == 0) return Error(ErrorCode::kUnavailable, "share guard: no mount id (statx STATX_MNT_ID)");
    roots.insert(root);
    for (const std::string& rel : config.git_dirs[i]) {
      Fd dir(OpenBeneath(views[i].fd, rel.c_str()));
      uint64_t pin = dir.fd >= 0 ? MountId(dir.fd) : 0;
      if (pin == 0) return Error(ErrorCode::kInternal, "share guard: git dir " + rel + " is not a mount in QEMU's view");
      pins.insert(pin);
    }
  }
  std::set<uint64_t> mounts = Descendants(config.qemu, roots);
  if (mounts.size() < roots.size()) return Error(ErrorCode::kInternal, "share guard: QEMU's mount table lacks the shares");
  auto guard = std::make_shared<Guard>(config, std::move(listener), std::move(mounts), std::move(pins),
                                       std::move(names));
  // Detached: it ends when QEMU exits (the listener hangs up) and holds only what it was given.
  std::thread([guard] { guard->Run(); }).detach();
  return OkStatus();
}

}  // namespace cloister::vm
