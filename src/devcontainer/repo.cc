#include "devcontainer/repo.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>
#include <vector>

#include <openssl/evp.h>

#include "base/file_util.h"
#include "base/strings.h"

namespace cloister::devcontainer {
namespace {

namespace fs = std::filesystem;

struct RepoFd {
  int fd = -1;
  explicit RepoFd(int f) : fd(f) {}
  RepoFd(const RepoFd&) = delete;
  ~RepoFd() {
    if (fd >= 0) close(fd);
  }
};

bool PathExists(const fs::path& p) {
  struct stat st;
  return lstat(p.c_str(), &st) == 0;
}

// SHA-256 over the tree, fed in a fixed order (sorted names) with lengths so that no two trees
// give the same stream.
class Hasher {
 public:
  Hasher() : ctx_(EVP_MD_CTX_new(), EVP_MD_CTX_free) { EVP_DigestInit_ex(ctx_.get(), EVP_sha256(), nullptr); }
  void Field(std::string_view s) {
    std::string len = std::to_string(s.size()) + ":";
    EVP_DigestUpdate(ctx_.get(), len.data(), len.size());
    EVP_DigestUpdate(ctx_.get(), s.data(), s.size());
  }
  void Raw(const void* p, size_t n) { EVP_DigestUpdate(ctx_.get(), p, n); }
  std::string Hex() {
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int n = 0;
    EVP_DigestFinal_ex(ctx_.get(), md, &n);
    return HexEncode(std::string_view(reinterpret_cast<char*>(md), n));
  }

 private:
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx_;
};

// Walks a folder through fds (never following a symlink), hashing it and, with `dest`, copying it.
class TreeWalker {
 public:
  TreeWalker(const CopyLimits& limits, const std::string& what, const DockerIgnore* ignore)
      : limits_(limits), what_(what), ignore_(ignore) {}

  Status Walk(int dir_fd, const std::string& rel, const std::string& dest, int depth) {
    if (depth > limits_.max_depth) return TooBig("deeper than " + std::to_string(limits_.max_depth) + " folders");
    int dup_fd = fcntl(dir_fd, F_DUPFD_CLOEXEC, 0);
    if (dup_fd < 0) return ErrnoError(what_ + ": dup", errno);
    struct CloseDir {
      void operator()(DIR* d) const { closedir(d); }
    };
    std::unique_ptr<DIR, CloseDir> d(fdopendir(dup_fd));
    if (!d) {
      close(dup_fd);
      return ErrnoError(what_ + ": read folder " + rel, errno);
    }
    std::vector<std::string> names;
    while (dirent* e = readdir(d.get())) {
      std::string n = e->d_name;
      if (n == "." || n == "..") continue;
      if (++entries_ > limits_.max_entries) {
        return TooBig("more than " + std::to_string(limits_.max_entries) + " entries");
      }
      names.push_back(std::move(n));
    }
    std::sort(names.begin(), names.end());
    for (const std::string& n : names) {
      std::string child = rel.empty() ? n : rel + "/" + n;
      struct stat st;
      if (fstatat(dir_fd, n.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
        return ErrnoError(what_ + ": " + child, errno);
      }
      if (ignore_ && ignore_->Excluded(child) && !(S_ISDIR(st.st_mode) && ignore_->HasExceptions())) {
        continue;
      }
      std::string out = dest.empty() ? "" : dest + "/" + n;
      if (S_ISDIR(st.st_mode)) {
        hash_.Field("d");
        hash_.Field(child);
        RepoFd sub(openat(dir_fd, n.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
        if (sub.fd < 0) return ErrnoError(what_ + ": " + child, errno);
        if (!out.empty() && mkdir(out.c_str(), 0755) != 0) return ErrnoError("mkdir " + out, errno);
        RETURN_IF_ERROR(Walk(sub.fd, child, out, depth + 1));
      } else if (S_ISLNK(st.st_mode)) {
        char target[4096];
        ssize_t len = readlinkat(dir_fd, n.c_str(), target, sizeof target - 1);
        if (len < 0) return ErrnoError(what_ + ": " + child, errno);
        std::string t(target, static_cast<size_t>(len));
        hash_.Field("l");
        hash_.Field(child);
        hash_.Field(t);
        if (!out.empty() && symlink(t.c_str(), out.c_str()) != 0) return ErrnoError("symlink " + out, errno);
      } else if (S_ISREG(st.st_mode)) {
        RETURN_IF_ERROR(File(dir_fd, n, child, (st.st_mode & 0111) != 0, out));
      } else {
        return Error(ErrorCode::kInvalidArgument,
                     what_ + ": " + child + " is not a file, folder or symlink");
      }
    }
    return OkStatus();
  }

  TreeDigest Finish() {
    TreeDigest d;
    d.sha256 = hash_.Hex();
    d.bytes = bytes_;
    d.entries = entries_;
    return d;
  }

 private:
  Error TooBig(const std::string& what) const {
    return Error(ErrorCode::kInvalidArgument, what_ + " has " + what,
                 "a local Feature is a small folder (devcontainer-feature.json, install.sh and "
                 "what it needs)");
  }

  Status File(int dir_fd, const std::string& n, const std::string& child, bool exec,
              const std::string& out) {
    RepoFd in(openat(dir_fd, n.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK));
    if (in.fd < 0) return ErrnoError(what_ + ": " + child, errno);
    struct stat st;
    if (fstat(in.fd, &st) != 0 || !S_ISREG(st.st_mode)) {
      return Error(ErrorCode::kInvalidArgument, what_ + ": " + child + " changed while it was read");
    }
    RepoFd o(out.empty() ? -1 : open(out.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                                 exec ? 0755 : 0644));
    if (!out.empty() && o.fd < 0) return ErrnoError("create " + out, errno);
    hash_.Field(exec ? "x" : "f");
    hash_.Field(child);
    Hasher content;
    char buf[65536];
    while (true) {
      ssize_t r = read(in.fd, buf, sizeof buf);
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) return ErrnoError(what_ + ": read " + child, errno);
      if (r == 0) break;
      bytes_ += static_cast<uint64_t>(r);
      if (bytes_ > limits_.max_bytes) return TooBig("more than " + FormatSize(limits_.max_bytes));
      content.Raw(buf, static_cast<size_t>(r));
      if (o.fd >= 0) {
        RETURN_IF_ERROR(WriteAll(o.fd, std::string_view(buf, static_cast<size_t>(r)), out));
      }
    }
    hash_.Field(content.Hex());
    if (o.fd >= 0 && fchmod(o.fd, exec ? 0755 : 0644) != 0) return ErrnoError("chmod " + out, errno);
    return OkStatus();
  }

  const CopyLimits& limits_;
  std::string what_;
  const DockerIgnore* ignore_;
  Hasher hash_;
  uint64_t bytes_ = 0;
  uint64_t entries_ = 0;
};

}  // namespace

std::string DevcontainerLocation::Dir() const {
  size_t slash = file.rfind('/');
  return slash == std::string::npos ? "" : file.substr(0, slash);
}

Result<std::string> JoinBeneath(const std::string& base, const std::string& rel) {
  if (!rel.empty() && rel[0] == '/') {
    return Error(ErrorCode::kPermissionDenied, "\"" + rel + "\" is an absolute path",
                 "paths in a devcontainer.json stay inside the repository");
  }
  std::vector<std::string> parts;
  for (const std::string& p : Split(base + "/" + rel, '/')) {
    if (p.empty() || p == ".") continue;
    if (p == "..") {
      if (parts.empty()) {
        return Error(ErrorCode::kPermissionDenied,
                     "\"" + rel + "\" leaves the repository",
                     "paths in a devcontainer.json stay inside the repository (its root holds "
                     ".git)");
      }
      parts.pop_back();
      continue;
    }
    parts.push_back(p);
  }
  return parts.empty() ? std::string(".") : Join(parts, "/");
}

Result<DevcontainerLocation> FindDevcontainer(const std::string& spec, const std::string& cwd) {
  fs::path start = spec.empty() ? fs::path(cwd) : fs::path(spec);
  if (start.is_relative()) start = fs::path(cwd) / start;
  start = start.lexically_normal();
  if (!start.empty() && start.filename().empty()) start = start.parent_path();
  struct stat st;
  if (stat(start.c_str(), &st) != 0) return ErrnoError(start.string(), errno);
  fs::path file;
  fs::path dir;
  if (S_ISDIR(st.st_mode)) {
    dir = start;
  } else {
    file = start;
    dir = start.parent_path();
  }
  fs::path root;
  for (fs::path p = dir;; p = p.parent_path()) {
    if (PathExists(p / ".git")) {
      root = p;
      break;
    }
    if (p == p.parent_path()) break;
  }
  if (file.empty()) {
    if (root.empty()) root = dir;
    if (spec.empty()) dir = root;  // the current repository's own devcontainer
    for (const char* candidate : {".devcontainer/devcontainer.json", ".devcontainer.json"}) {
      // Looked for in the folder given (the repository's root when none was).
      if (PathExists(dir / candidate)) {
        file = dir / candidate;
        break;
      }
    }
    if (file.empty()) {
      return Error(ErrorCode::kNotFound,
                   "no .devcontainer/devcontainer.json or .devcontainer.json in " + dir.string(),
                   "run it in the repository, or give the file: --devcontainer PATH");
    }
  } else if (root.empty()) {
    root = dir.filename() == ".devcontainer" ? dir.parent_path() : dir;
  }
  DevcontainerLocation loc;
  loc.root = root.string();
  std::string rel = file.lexically_relative(root).string();
  if (rel.empty() || StartsWith(rel, "..")) {
    return Error(ErrorCode::kPermissionDenied, file.string() + " is not inside " + root.string());
  }
  loc.file = rel;
  return loc;
}

Result<RepoDir> RepoDir::Open(const std::string& root) {
  int fd = open(root.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return ErrnoError("open " + root, errno);
  return RepoDir(fd, root);
}

RepoDir::RepoDir(RepoDir&& other) noexcept : fd_(other.fd_), root_(std::move(other.root_)) {
  other.fd_ = -1;
}

RepoDir::~RepoDir() {
  if (fd_ >= 0) close(fd_);
}

Result<int> RepoDir::OpenBeneath(const std::string& rel, int flags) const {
  ASSIGN_OR_RETURN(std::string path, JoinBeneath("", rel));
  struct open_how how {};
  how.flags = static_cast<uint64_t>(flags | O_CLOEXEC | O_NOCTTY);
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS;
  long r;
  do {
    r = syscall(SYS_openat2, fd_, path.c_str(), &how, sizeof how);
  } while (r < 0 && (errno == EINTR || errno == EAGAIN));
  if (r >= 0) return static_cast<int>(r);
  int e = errno;
  if (e == ENOSYS) {
    return Error(ErrorCode::kUnavailable, "this kernel has no openat2 (Linux 5.6 or later)",
                 "cloister reads a repository's files only through openat2");
  }
  if (e == EXDEV || e == ELOOP) {
    return Error(ErrorCode::kPermissionDenied,
                 path + " leads out of the repository " + root_ + " (a symlink or ..)",
                 "paths in a devcontainer.json, and the symlinks on them, stay inside the "
                 "repository");
  }
  return ErrnoError(root_ + "/" + path, e);
}

Result<std::string> RepoDir::ReadFile(const std::string& rel, size_t max_bytes) const {
  ASSIGN_OR_RETURN(int raw, OpenBeneath(rel, O_RDONLY | O_NONBLOCK));
  RepoFd fd(raw);
  struct stat st;
  if (fstat(fd.fd, &st) != 0) return ErrnoError(rel, errno);
  if (!S_ISREG(st.st_mode)) return Error(ErrorCode::kInvalidArgument, rel + " is not a file");
  if (static_cast<uint64_t>(st.st_size) > max_bytes) {
    return Error(ErrorCode::kInvalidArgument,
                 rel + " is larger than " + FormatSize(max_bytes));
  }
  std::string out;
  char buf[65536];
  while (true) {
    ssize_t r = read(fd.fd, buf, sizeof buf);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return ErrnoError("read " + rel, errno);
    if (r == 0) break;
    if (out.size() + static_cast<size_t>(r) > max_bytes) {
      return Error(ErrorCode::kInvalidArgument, rel + " is larger than " + FormatSize(max_bytes));
    }
    out.append(buf, static_cast<size_t>(r));
  }
  return out;
}

Result<int> RepoDir::OpenDirectory(const std::string& rel) const {
  return OpenBeneath(rel, O_RDONLY | O_DIRECTORY);
}

Result<TreeDigest> RepoDir::CopyTree(const std::string& rel, const std::string& dest,
                                     const CopyLimits& limits, const DockerIgnore* ignore) const {
  ASSIGN_OR_RETURN(int raw, OpenDirectory(rel));
  RepoFd dir(raw);
  if (!dest.empty() && mkdir(dest.c_str(), 0755) != 0) return ErrnoError("mkdir " + dest, errno);
  TreeWalker w(limits, rel, ignore);
  RETURN_IF_ERROR(w.Walk(dir.fd, "", dest, 0));
  return w.Finish();
}

Result<TreeDigest> RepoDir::DigestTree(const std::string& rel, const CopyLimits& limits) const {
  return CopyTree(rel, "", limits);
}

}  // namespace cloister::devcontainer
