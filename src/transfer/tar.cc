#include "transfer/tar.h"

#include <archive.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <set>
#include <string_view>
#include <vector>

#include "protocol/contract.h"
#include "base/terminal_text.h"
#include "transfer/beneath.h"

namespace cloister::transfer {
namespace {

using ReadPtr = std::unique_ptr<struct archive, decltype(&archive_read_free)>;
using WritePtr = std::unique_ptr<struct archive, decltype(&archive_write_free)>;

std::string ArchiveError(struct archive* a, const char* what) {
  const char* e = archive_error_string(a);
  // SECURITY: libarchive's messages can quote entry names from the guest.
  return std::string(what) + ": " + TerminalSafe(e ? e : "unknown libarchive error");
}

Error Corrupt(const std::string& message) {
  return Error(ErrorCode::kCorrupt, message,
               "nothing after this entry was copied; the workspace's tar sent it (treat the "
               "workspace's files as untrusted)");
}

// Splits a tar entry name into components, or says why it is refused. A trailing '/' (a
// directory, as tar writes them) and one leading "./" are accepted.
Result<std::vector<std::string>> Components(std::string_view name) {
  if (name.empty()) return Corrupt("an entry without a name");
  if (name.size() > kMaxPath) return Corrupt("an entry name longer than 4096 bytes");
  if (name.front() == '/') return Corrupt("absolute entry name '" + TerminalSafe(name) + "'");
  if (name.substr(0, 2) == "./") name.remove_prefix(2);
  while (!name.empty() && name.back() == '/') name.remove_suffix(1);
  std::vector<std::string> parts;
  size_t start = 0;
  while (start <= name.size()) {
    size_t slash = name.find('/', start);
    if (slash == std::string_view::npos) slash = name.size();
    std::string_view part = name.substr(start, slash - start);
    if (part.empty() || part == "." || part == "..") {
      return Corrupt("entry name '" + TerminalSafe(name) + "' has an empty, '.' or '..' part");
    }
    parts.emplace_back(part);
    start = slash + 1;
  }
  return parts;
}

std::string JoinPath(const std::vector<std::string>& parts) {
  std::string out;
  for (const std::string& p : parts) {
    if (!out.empty()) out += '/';
    out += p;
  }
  return out;
}

// The one entry policy (SECURITY: see tar.h). Holds what earlier entries of the archive made.
class EntryChecker {
 public:
  explicit EntryChecker(const EntryPolicy& policy) : policy_(policy) {}

  // The host-side name for `raw` (checked and renamed), or the refusal.
  Result<std::string> MapName(const char* raw) {
    if (raw == nullptr) return Corrupt("an entry without a name");
    auto parts = Components(raw);
    if (!parts.ok()) return parts.error();
    if ((*parts)[0] != policy_.top) {
      return Corrupt("entry '" + TerminalSafe(raw) + "' is not under '" +
                     TerminalSafe(policy_.top) + "'");
    }
    if (!policy_.rename_top.empty()) (*parts)[0] = policy_.rename_top;
    std::string mapped = JoinPath(*parts);
    // No entry below a symlink this archive made (and so none written through it).
    std::string prefix;
    for (size_t i = 0; i + 1 < parts->size(); ++i) {
      prefix += (i ? "/" : "") + (*parts)[i];
      if (symlinks_.count(prefix)) {
        return Corrupt("entry '" + TerminalSafe(raw) + "' goes through the archive's symlink '" +
                       TerminalSafe(prefix) + "'");
      }
    }
    if (parts->size() > 1 && top_type_ != AE_IFDIR) {
      return Corrupt("entry '" + TerminalSafe(raw) + "' is below a top that is not a directory");
    }
    return mapped;
  }

  // Checks and rewrites `entry` in place. Returns false when it is to be skipped (told to warn).
  Result<bool> Check(struct archive_entry* entry) {
    auto name = MapName(archive_entry_pathname(entry));
    if (!name.ok()) return name.error();
    bool is_top = name->find('/') == std::string::npos;
    if (!is_top && !seen_top_) return Corrupt("entry '" + TerminalSafe(*name) + "' before its top");
    const char* hardlink = archive_entry_hardlink(entry);
    mode_t type = archive_entry_filetype(entry);
    if (policy_.top_must_be_file && (!is_top || seen_top_ || hardlink || type != AE_IFREG)) {
      return Error(ErrorCode::kFailedPrecondition,
                   "the destination is a file but the source is not a single regular file",
                   "name a directory (or a new path) as the destination");
    }
    if (hardlink) {
      auto target = MapName(hardlink);
      if (!target.ok()) return target.error();
      if (!files_.count(*target)) {
        return Corrupt("hard link '" + TerminalSafe(*name) + "' to '" + TerminalSafe(hardlink) +
                       "', which is not a file this archive wrote");
      }
      archive_entry_set_hardlink(entry, target->c_str());
      archive_entry_set_size(entry, 0);
    } else if (type != AE_IFREG && type != AE_IFDIR && type != AE_IFLNK) {
      ++skipped_;
      if (policy_.warn) {
        policy_.warn("skipped '" + TerminalSafe(*name) +
                     "': not a regular file, directory or symlink");
      }
      if (is_top) return Corrupt("the source is not a regular file, directory or symlink");
      return false;
    }
    if (is_top) {
      seen_top_ = true;
      top_type_ = hardlink ? AE_IFREG : type;
    }
    archive_entry_set_pathname(entry, name->c_str());
    // SECURITY: no setuid/setgid/sticky, no owners, ACLs, xattrs or flags from the guest.
    archive_entry_set_perm(entry, archive_entry_perm(entry) & 0777);
    archive_entry_set_uid(entry, getuid());
    archive_entry_set_gid(entry, getgid());
    archive_entry_set_uname(entry, nullptr);
    archive_entry_set_gname(entry, nullptr);
    archive_entry_acl_clear(entry);
    archive_entry_xattr_clear(entry);
    archive_entry_set_fflags(entry, 0, 0);
    if (!hardlink && type == AE_IFLNK) {
      symlinks_.insert(*name);
      files_.erase(*name);
    } else if (!hardlink && type == AE_IFREG) {
      files_.insert(*name);
      symlinks_.erase(*name);
    } else if (type == AE_IFDIR) {
      files_.erase(*name);
    }
    return true;
  }

  Status Finish() const {
    if (!seen_top_) {
      return Error(ErrorCode::kNotFound, "the workspace sent no files",
                   "check the path in the workspace (`cloister exec NAME -- ls -la PATH`)");
    }
    return OkStatus();
  }

  uint64_t skipped() const { return skipped_; }

 private:
  const EntryPolicy& policy_;
  std::set<std::string> symlinks_;
  std::set<std::string> files_;
  bool seen_top_ = false;
  mode_t top_type_ = 0;
  uint64_t skipped_ = 0;
};

ReadPtr OpenGuestTar(int in_fd) {
  ReadPtr a(archive_read_new(), archive_read_free);
  if (!a) return a;
  // Tar formats only, and no decompression filters: the fewest parsers of guest bytes.
  archive_read_support_format_tar(a.get());
  archive_read_support_format_gnutar(a.get());
  if (archive_read_open_fd(a.get(), in_fd, 64 * 1024) != ARCHIVE_OK) a.reset();
  return a;
}

struct FdSink {
  int fd;
};

la_ssize_t WriteCallback(struct archive* a, void* client, const void* buf, size_t len) {
  int fd = static_cast<FdSink*>(client)->fd;
  while (true) {
    ssize_t n = send(fd, buf, len, MSG_NOSIGNAL);
    if (n < 0 && errno == ENOTSOCK) n = write(fd, buf, len);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) archive_set_error(a, errno, "write: %s", strerror(errno));
    return n;
  }
}

WritePtr OpenTarWriter(FdSink* sink) {
  WritePtr w(archive_write_new(), archive_write_free);
  if (!w) return w;
  archive_write_set_format_gnutar(w.get());
  archive_write_set_bytes_in_last_block(w.get(), 1);
  if (archive_write_open(w.get(), sink, nullptr, WriteCallback, nullptr) != ARCHIVE_OK) w.reset();
  return w;
}

// Copies the current entry's data from `in` to the tar writer `out`.
Status CopyData(struct archive* in, struct archive* out, uint64_t* bytes) {
  while (true) {
    const void* buf = nullptr;
    size_t size = 0;
    la_int64_t offset = 0;
    int r = archive_read_data_block(in, &buf, &size, &offset);
    if (r == ARCHIVE_EOF) return OkStatus();
    if (r != ARCHIVE_OK) return Corrupt(ArchiveError(in, "reading the workspace's tar"));
    const char* p = static_cast<const char*>(buf);
    size_t left = size;
    while (left > 0) {
      la_ssize_t w = archive_write_data(out, p, left);
      if (w <= 0) return Error(ErrorCode::kIo, ArchiveError(out, "writing"));
      p += w;
      left -= static_cast<size_t>(w);
    }
    *bytes += size;
  }
}

// Copies the current entry's data into `fd` (a new file), sparse regions as holes, `size` long.
Status CopyToFd(struct archive* in, int fd, int64_t size, uint64_t* bytes) {
  while (true) {
    const void* buf = nullptr;
    size_t len = 0;
    la_int64_t offset = 0;
    int r = archive_read_data_block(in, &buf, &len, &offset);
    if (r == ARCHIVE_EOF) break;
    if (r != ARCHIVE_OK) return Corrupt(ArchiveError(in, "reading the workspace's tar"));
    const char* p = static_cast<const char*>(buf);
    while (len > 0) {
      ssize_t w = pwrite(fd, p, len, offset);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) return ErrnoError("writing a file of the copy", w < 0 ? errno : EIO);
      p += w;
      offset += w;
      len -= static_cast<size_t>(w);
      *bytes += static_cast<uint64_t>(w);
    }
  }
  if (size > 0 && ftruncate(fd, size) != 0) return ErrnoError("writing a file of the copy", errno);
  return OkStatus();
}

// Writes one checked entry (EntryChecker::Check made its name host-side and its mode safe).
Status WriteEntry(struct archive* in, struct archive_entry* entry, BeneathWriter& out,
                  uint64_t* bytes) {
  ASSIGN_OR_RETURN(std::vector<std::string> path, Components(archive_entry_pathname(entry)));
  const mode_t mode = archive_entry_perm(entry);
  const int64_t mtime = archive_entry_mtime(entry);
  if (const char* hardlink = archive_entry_hardlink(entry)) {
    ASSIGN_OR_RETURN(std::vector<std::string> target, Components(hardlink));
    return out.MakeHardLink(path, target);
  }
  switch (archive_entry_filetype(entry)) {
    case AE_IFDIR:
      return out.MakeDirectory(path, mode, mtime);
    case AE_IFLNK: {
      const char* target = archive_entry_symlink(entry);
      if (target == nullptr || *target == '\0') return Corrupt("a symlink without a target");
      return out.MakeSymlink(path, target, mtime);
    }
    case AE_IFREG: {
      const int64_t size = archive_entry_size(entry);
      return out.WriteFile(path, mode, mtime,
                           [&](int fd) { return CopyToFd(in, fd, size, bytes); });
    }
    default:
      return Corrupt("an entry of an unexpected type");  // EntryChecker skips them first
  }
}

}  // namespace

Result<TarStats> ExtractTar(int in_fd, const std::string& dest_dir, const EntryPolicy& policy) {
  ReadPtr in = OpenGuestTar(in_fd);
  if (!in) return Error(ErrorCode::kIo, "cannot read the workspace's tar stream");
  // SECURITY: every write goes through directory fds beneath dest_dir, never through a symlink,
  // even one made while the copy runs (beneath.h). No owners, ACLs, xattrs or flags; modes are
  // masked to 0777 by the checker.
  ASSIGN_OR_RETURN(BeneathWriter out, BeneathWriter::Open(dest_dir));
  EntryChecker checker(policy);
  TarStats stats;
  Status result = OkStatus();
  while (true) {
    struct archive_entry* entry = nullptr;
    int r = archive_read_next_header(in.get(), &entry);
    if (r == ARCHIVE_EOF) break;
    if (r != ARCHIVE_OK && r != ARCHIVE_WARN) {
      result = Corrupt(ArchiveError(in.get(), "reading the workspace's tar"));
      break;
    }
    auto keep = checker.Check(entry);
    if (!keep.ok()) {
      result = keep.error();
      break;
    }
    if (!*keep) continue;
    if (Status st = WriteEntry(in.get(), entry, out, &stats.bytes); !st.ok()) {
      result = st;
      break;
    }
    ++stats.entries;
  }
  // Directory modes and times once their contents are written (also after a refusal, as tar).
  if (Status st = out.FinishDirectories(); !st.ok() && result.ok()) result = st;
  if (!result.ok()) return result.error();
  RETURN_IF_ERROR(checker.Finish());
  stats.skipped = checker.skipped();
  return stats;
}

Result<TarStats> FilterTar(int in_fd, int out_fd, const EntryPolicy& policy) {
  ReadPtr in = OpenGuestTar(in_fd);
  if (!in) return Error(ErrorCode::kIo, "cannot read the workspace's tar stream");
  FdSink sink{out_fd};
  WritePtr out = OpenTarWriter(&sink);
  if (!out) return Error(ErrorCode::kIo, "cannot start the output tar stream");
  EntryChecker checker(policy);
  TarStats stats;
  while (true) {
    struct archive_entry* entry = nullptr;
    int r = archive_read_next_header(in.get(), &entry);
    if (r == ARCHIVE_EOF) break;
    if (r != ARCHIVE_OK && r != ARCHIVE_WARN) {
      return Corrupt(ArchiveError(in.get(), "reading the workspace's tar"));
    }
    ASSIGN_OR_RETURN(bool keep, checker.Check(entry));
    if (!keep) continue;
    if (archive_entry_filetype(entry) != AE_IFREG || archive_entry_hardlink(entry)) {
      archive_entry_set_size(entry, 0);
    }
    if (archive_write_header(out.get(), entry) != ARCHIVE_OK) {
      return Error(ErrorCode::kIo, ArchiveError(out.get(), "writing the tar stream"));
    }
    if (archive_entry_size(entry) > 0) {
      RETURN_IF_ERROR(CopyData(in.get(), out.get(), &stats.bytes));
    }
    ++stats.entries;
  }
  if (archive_write_close(out.get()) != ARCHIVE_OK) {
    return Error(ErrorCode::kIo, ArchiveError(out.get(), "finishing the tar stream"));
  }
  RETURN_IF_ERROR(checker.Finish());
  stats.skipped = checker.skipped();
  return stats;
}

Result<TarStats> WriteTar(int out_fd, const std::string& src_path, const std::string& top_name,
                          const std::function<void(const std::string&)>& warn) {
  struct stat st;
  if (lstat(src_path.c_str(), &st) != 0) return ErrnoError("cannot read " + src_path, errno);
  ReadPtr disk(archive_read_disk_new(), archive_read_free);
  if (!disk) return Error(ErrorCode::kInternal, "archive_read_disk_new failed");
  archive_read_disk_set_symlink_physical(disk.get());  // store symlinks, never follow them
  archive_read_disk_set_behavior(disk.get(), ARCHIVE_READDISK_NO_XATTR | ARCHIVE_READDISK_NO_ACL |
                                                 ARCHIVE_READDISK_NO_FFLAGS);
  if (archive_read_disk_open(disk.get(), src_path.c_str()) != ARCHIVE_OK) {
    return Error(ErrorCode::kIo, ArchiveError(disk.get(), ("cannot read " + src_path).c_str()));
  }
  FdSink sink{out_fd};
  WritePtr out = OpenTarWriter(&sink);
  if (!out) return Error(ErrorCode::kIo, "cannot start the tar stream");
  TarStats stats;
  std::unique_ptr<struct archive_entry, decltype(&archive_entry_free)> entry(archive_entry_new(),
                                                                             archive_entry_free);
  while (true) {
    archive_entry_clear(entry.get());
    int r = archive_read_next_header2(disk.get(), entry.get());
    if (r == ARCHIVE_EOF) break;
    if (r != ARCHIVE_OK && r != ARCHIVE_WARN) {
      return Error(ErrorCode::kIo, ArchiveError(disk.get(), "reading the source"));
    }
    std::string path = archive_entry_pathname(entry.get());
    if (path.compare(0, src_path.size(), src_path) != 0) {
      return Error(ErrorCode::kInternal, "walking " + src_path + " gave " + path);
    }
    std::string rel = path.substr(src_path.size());
    std::string name = top_name + rel;
    mode_t type = archive_entry_filetype(entry.get());
    if (type != AE_IFREG && type != AE_IFDIR && type != AE_IFLNK) {
      if (rel.empty()) {
        return Error(ErrorCode::kInvalidArgument,
                     src_path + " is not a regular file, directory or symlink");
      }
      ++stats.skipped;
      if (warn) warn("skipped '" + TerminalSafe(path) + "': not a regular file, directory or symlink");
      continue;
    }
    if (type == AE_IFDIR) archive_read_disk_descend(disk.get());
    archive_entry_set_pathname(entry.get(), name.c_str());
    archive_entry_set_uid(entry.get(), protocol::kGuestUid);
    archive_entry_set_gid(entry.get(), protocol::kGuestGid);
    archive_entry_set_uname(entry.get(), protocol::kGuestUser);
    archive_entry_set_gname(entry.get(), protocol::kGuestUser);
    if (const char* hl = archive_entry_hardlink(entry.get())) {
      std::string target = hl;
      if (target.compare(0, src_path.size(), src_path) == 0) {
        archive_entry_set_hardlink(entry.get(), (top_name + target.substr(src_path.size())).c_str());
      } else {
        archive_entry_set_hardlink(entry.get(), nullptr);  // keep it as its own file
      }
    }
    if (archive_write_header(out.get(), entry.get()) != ARCHIVE_OK) {
      return Error(ErrorCode::kIo, ArchiveError(out.get(), "writing the tar stream"));
    }
    if (type == AE_IFREG && archive_entry_size(entry.get()) > 0) {
      RETURN_IF_ERROR(CopyData(disk.get(), out.get(), &stats.bytes));
    }
    ++stats.entries;
  }
  if (archive_write_close(out.get()) != ARCHIVE_OK) {
    return Error(ErrorCode::kIo, ArchiveError(out.get(), "finishing the tar stream"));
  }
  return stats;
}

}  // namespace cloister::transfer
