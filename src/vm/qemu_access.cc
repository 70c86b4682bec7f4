#include "vm/qemu_access.h"

#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>

#include <nlohmann/json.hpp>

#include "base/strings.h"
#include "base/subprocess.h"

namespace cloister::vm {

Result<QemuIdentity> QemuIdentityFor(const std::string& mac, bool kvm) {
  QemuIdentity id;
  if (geteuid() != 0) return id;
  std::string hex;
  for (char c : mac) {
    if (c != ':') hex += c;
  }
  if (hex.size() != 12 || hex.find_first_not_of("0123456789abcdefABCDEF") != std::string::npos) {
    return Error(ErrorCode::kInvalidArgument, "bad workspace MAC '" + mac + "'");
  }
  return QemuIdentityForId(static_cast<uint32_t>(std::stoul(hex.substr(6), nullptr, 16)), kvm);
}

Result<QemuIdentity> QemuIdentityForId(uint32_t low, bool kvm) {
  QemuIdentity id;
  if (geteuid() != 0) return id;
  if (low >= (1u << 24)) return Error(ErrorCode::kInvalidArgument, "bad QEMU id " + std::to_string(low));
  id.drop = true;
  id.uid = kQemuIdBase + low;
  id.gid = kQemuIdBase + low;
  if (getpwuid(id.uid) != nullptr) {
    return Error(ErrorCode::kFailedPrecondition,
                 "uid " + std::to_string(id.uid) + " (for QEMU of a workspace) belongs to an "
                     "account on this host",
                 "remove that account; cloister runs QEMU under uids from " +
                     std::to_string(kQemuIdBase) + " upwards");
  }
  if (kvm) {
    if (group* g = getgrnam("kvm"); g != nullptr) id.groups.push_back(g->gr_gid);
  }
  return id;
}

namespace {

// realpath, or an error naming the file.
Result<std::string> Canonical(const std::string& path) {
  char buf[PATH_MAX];
  if (realpath(path.c_str(), buf) == nullptr) return ErrnoError("resolve " + path, errno);
  return std::string(buf);
}

}  // namespace

Result<std::vector<DiskSpec>> ReadBackingChain(const std::string& top, const std::string& format,
                                               const std::vector<std::string>& allowed_dirs,
                                               const std::vector<std::string>& allowed_files) {
  std::vector<std::string> dirs, files;
  for (const std::string& d : allowed_dirs) {
    ASSIGN_OR_RETURN(std::string c, Canonical(d));
    dirs.push_back(c + "/");
  }
  for (const std::string& f : allowed_files) {
    ASSIGN_OR_RETURN(std::string c, Canonical(f));
    files.push_back(c);
  }
  std::vector<DiskSpec> chain;
  std::string path = top, fmt = format;
  while (fmt == "qcow2") {
    if (chain.size() >= 256) {
      return Error(ErrorCode::kCorrupt, "the backing chain of " + top + " is longer than 256 layers");
    }
    // SECURITY: the header was last written by QEMU (guest-facing): its backing name and format
    // are checked before anything opens them, and only this one layer is opened here.
    ASSIGN_OR_RETURN(RunOutput out, RunProcessChecked({"qemu-img", "info", "--output=json", "-f",
                                                       "qcow2", path}));
    nlohmann::json info = nlohmann::json::parse(out.out, nullptr, false);
    if (info.is_discarded() || !info.is_object()) {
      return Error(ErrorCode::kCorrupt, "qemu-img info " + path + ": unreadable output");
    }
    auto backing = info.find("full-backing-filename");
    if (backing == info.end()) break;  // the bottom layer
    if (!backing->is_string()) return Error(ErrorCode::kCorrupt, path + ": bad backing file name");
    auto bfmt = info.find("backing-filename-format");
    if (bfmt == info.end() || !bfmt->is_string() ||
        (*bfmt != "qcow2" && *bfmt != "raw")) {
      return Error(ErrorCode::kCorrupt,
                   path + " names a backing file without a qcow2/raw format; refusing to probe it");
    }
    std::string next = backing->get<std::string>();
    auto canonical = Canonical(next);
    if (!canonical.ok()) {
      return Error(ErrorCode::kCorrupt, path + ": backing file " + next + " is missing");
    }
    bool allowed = false;
    for (const std::string& d : dirs) allowed = allowed || StartsWith(*canonical, d);
    for (const std::string& f : files) allowed = allowed || *canonical == f;
    if (!allowed) {
      return Error(ErrorCode::kCorrupt,
                   path + " names backing file " + next +
                       ", outside the workspace and its base image: refusing to boot",
                   "its top layer was tampered with; restore a checkpoint or `cloister reset`");
    }
    path = *canonical;
    fmt = bfmt->get<std::string>();
    chain.push_back(DiskSpec{path, fmt, std::nullopt});
  }
  return chain;
}

QemuFds::~QemuFds() { CloseAll(); }

void QemuFds::CloseAll() {
  for (int fd : fds_) close(fd);
  fds_.clear();
}

Result<int> QemuFds::Open(const std::string& path, int flags) {
  int fd = open(path.c_str(), flags | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) return ErrnoError("open " + path, errno);
  fds_.push_back(fd);
  return fd;
}

Result<std::string> QemuFds::AddToFdSet(const std::string& path, int flags) {
  int set = next_set_++;
  ASSIGN_OR_RETURN(int fd, Open(path, flags));
  sets_.push_back({fd, set});
  if ((flags & O_ACCMODE) == O_RDWR) {
    ASSIGN_OR_RETURN(int ro, Open(path, O_RDONLY));
    sets_.push_back({ro, set});
  }
  return "/dev/fdset/" + std::to_string(set);
}

Result<std::string> QemuFds::AddProcPath(const std::string& path, int flags,
                                         bool copy_unless_world_readable) {
  ASSIGN_OR_RETURN(int fd, Open(path, flags));
  struct stat st;
  if (copy_unless_world_readable && fstat(fd, &st) == 0 && S_ISREG(st.st_mode) &&
      (st.st_mode & S_IROTH) == 0) {
    int mfd = memfd_create("cloister-boot-file", MFD_CLOEXEC);
    if (mfd < 0) return ErrnoError("memfd_create", errno);
    fds_.push_back(mfd);
    char buf[1 << 16];
    while (true) {
      ssize_t n = read(fd, buf, sizeof(buf));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return ErrnoError("read " + path, errno);
      if (n == 0) break;
      for (ssize_t off = 0; off < n;) {
        ssize_t w = write(mfd, buf + off, static_cast<size_t>(n - off));
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) return ErrnoError("copy " + path, errno);
        off += w;
      }
    }
    fd = mfd;
  }
  return "/proc/self/fd/" + std::to_string(fd);
}

int QemuFds::AddListener(int fd) {
  fds_.push_back(fd);
  return fd;
}

}  // namespace cloister::vm
