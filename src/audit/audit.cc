#include "audit/audit.h"

#include <fcntl.h>
#include <linux/fs.h>
#include <poll.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "base/strings.h"

namespace cloister::audit {
namespace {

// /proc/self/mountinfo escapes space, tab, newline and backslash as \ooo.
std::string Unescape(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 3 < s.size()) {
      const char a = s[i + 1], b = s[i + 2], c = s[i + 3];
      if (a >= '0' && a <= '7' && b >= '0' && b <= '7' && c >= '0' && c <= '7') {
        out += static_cast<char>(((a - '0') << 6) | ((b - '0') << 3) | (c - '0'));
        i += 3;
        continue;
      }
    }
    out += s[i];
  }
  return out;
}

// Freezes a mounted filesystem for the lifetime of the object. A forked watchdog thaws it if the
// parent dies (its pipe reaches EOF) or the timeout passes.
class Freeze {
 public:
  static Result<std::unique_ptr<Freeze>> Start(const std::string& mountpoint,
                                               std::chrono::seconds timeout) {
    int dir = open(mountpoint.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir < 0) return ErrnoError("open mount point " + mountpoint, errno);
    int p[2];
    if (pipe2(p, O_CLOEXEC) != 0) {
      int err = errno;
      close(dir);
      return ErrnoError("pipe", err);
    }
    pid_t pid = fork();
    if (pid < 0) {
      int err = errno;
      close(dir);
      close(p[0]);
      close(p[1]);
      return ErrnoError("fork watchdog", err);
    }
    if (pid == 0) {
      // Watchdog: a byte means "thawed, done"; EOF or timeout means thaw now.
      close(p[1]);
      struct pollfd pfd = {p[0], POLLIN, 0};
      int r;
      do {
        r = poll(&pfd, 1, static_cast<int>(timeout.count() * 1000));
      } while (r < 0 && errno == EINTR);
      char c;
      if (r > 0 && read(p[0], &c, 1) == 1) _exit(0);
      ioctl(dir, FITHAW, 0);
      _exit(3);
    }
    close(p[0]);
    auto f = std::unique_ptr<Freeze>(new Freeze(dir, p[1], pid, mountpoint));
    if (ioctl(dir, FIFREEZE, 0) != 0) {
      int err = errno;
      f->frozen_ = false;
      return Error(err == EPERM ? ErrorCode::kPermissionDenied : ErrorCode::kFailedPrecondition,
                   "cannot freeze " + mountpoint + ": " + std::strerror(err),
                   "the audit refuses to probe a mounted filesystem it cannot freeze; run it as "
                   "root, or unmount the filesystem");
    }
    f->frozen_ = true;
    return f;
  }

  Status Thaw() {
    if (!frozen_) return OkStatus();
    frozen_ = false;
    if (ioctl(dir_, FITHAW, 0) != 0) {
      return ErrnoError("thaw " + mountpoint_, errno);
    }
    return OkStatus();
  }

  ~Freeze() {
    Status s = Thaw();
    (void)s;
    if (!frozen_) {
      char done = 1;
      ssize_t n = write(pipe_, &done, 1);
      (void)n;
    }
    close(pipe_);
    int st;
    while (waitpid(pid_, &st, 0) < 0 && errno == EINTR) {
    }
    close(dir_);
  }

 private:
  Freeze(int dir, int pipe_w, pid_t pid, std::string mp)
      : dir_(dir), pipe_(pipe_w), pid_(pid), mountpoint_(std::move(mp)) {}
  int dir_;
  int pipe_;
  pid_t pid_;
  std::string mountpoint_;
  bool frozen_ = false;
};

}  // namespace

Result<std::string> FindMountpoint(const std::string& device) {
  struct stat st;
  if (stat(device.c_str(), &st) != 0) return ErrnoError("stat " + device, errno);
  if (!S_ISBLK(st.st_mode)) return std::string();
  const std::string want =
      std::to_string(major(st.st_rdev)) + ":" + std::to_string(minor(st.st_rdev));
  std::ifstream in("/proc/self/mountinfo");
  if (!in) return Error(ErrorCode::kUnavailable, "cannot read /proc/self/mountinfo");
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string id, parent, devno, root, mountpoint;
    if (!(fields >> id >> parent >> devno >> root >> mountpoint)) continue;
    if (devno == want) return Unescape(mountpoint);
  }
  return std::string();
}

Result<DiskReport> AuditDisk(const std::string& path, const DiskAuditOptions& options) {
  std::unique_ptr<Freeze> freeze;
  std::string mountpoint;
  std::unique_ptr<Device> device;
  if (IsBlockDevice(path)) {
    auto excl = OpenDevice(path, OpenOptions{.writable = true, .exclusive = true});
    if (excl.ok()) {
      device = std::move(excl).value();
    } else if (excl.error().code() == ErrorCode::kBusy) {
      ASSIGN_OR_RETURN(mountpoint, FindMountpoint(path));
      if (mountpoint.empty()) {
        return Error(ErrorCode::kBusy, path + " is in use but not mounted (held by another program)",
                     "stop whatever holds it (swap, device-mapper, another audit) and retry");
      }
      ASSIGN_OR_RETURN(freeze, Freeze::Start(mountpoint, options.freeze_timeout));
      ASSIGN_OR_RETURN(device, OpenDevice(path, OpenOptions{.writable = true}));
    } else {
      return excl.error();
    }
  } else {
    ASSIGN_OR_RETURN(device, OpenDevice(path, OpenOptions{.writable = true}));
  }
  AuditOptions audit = options.audit;
  if (freeze) {
    // Stop probing well before the watchdog would thaw the filesystem under the probe.
    auto margin = std::max<std::chrono::seconds>(std::chrono::seconds(5), options.freeze_timeout / 10);
    auto limit = std::chrono::steady_clock::now() + options.freeze_timeout - margin;
    if (!audit.deadline || *audit.deadline > limit) audit.deadline = limit;
  }
  auto report = AuditDevice(*device, audit);
  device.reset();
  if (freeze) {
    Status thawed = freeze->Thaw();
    freeze.reset();
    if (!thawed.ok()) return thawed.error();
  }
  if (!report.ok()) return report.error().WithContext(path);
  report->device = path;
  report->mountpoint = mountpoint;
  report->frozen = !mountpoint.empty();
  return report;
}

}  // namespace cloister::audit
