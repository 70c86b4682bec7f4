#include "image/build_util.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "base/strings.h"
#include "base/subprocess.h"
#include "catalog/names.h"
#include "catalog/sha256.h"
#include "image/ext4_times.h"
#include "protocol/contract.h"

namespace cloister::image {

namespace fs = std::filesystem;

void Stages::Start(const std::string& name) {
  ++index_;
  name_ = name;
  start_ = std::chrono::steady_clock::now();
  if (sink_) sink_("image: [" + std::to_string(index_) + "/" + std::to_string(total_) + "] " + name + " ...");
}

void Stages::Done(const std::string& detail) {
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  char t[32];
  std::snprintf(t, sizeof t, "%.1f s", secs);
  if (sink_) {
    sink_("image: [" + std::to_string(index_) + "/" + std::to_string(total_) + "] " + name_ +
          ": " + detail + " (" + t + ")");
  }
}

Result<std::string> ReadFile(const std::string& path, size_t max_bytes) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return ErrnoError("open " + path, errno ? errno : ENOENT);
  std::string data;
  char buf[65536];
  while (in.read(buf, sizeof buf) || in.gcount() > 0) {
    data.append(buf, static_cast<size_t>(in.gcount()));
    if (data.size() > max_bytes) {
      return Error(ErrorCode::kInvalidArgument, path + " is larger than " + FormatSize(max_bytes));
    }
  }
  return data;
}

Status MakeDirs(const std::string& path) {
  std::error_code ec;
  fs::create_directories(path, ec);
  if (ec) return ErrnoError("mkdir " + path, ec.value());
  return OkStatus();
}

Status RemoveTree(const std::string& path) {
  std::error_code ec;
  fs::remove_all(path, ec);
  if (ec) return ErrnoError("remove " + path, ec.value());
  return OkStatus();
}

Status CopyFile(const std::string& from, const std::string& to) {
  std::error_code ec;
  fs::copy_file(from, to, fs::copy_options::overwrite_existing, ec);
  if (ec) return ErrnoError("copy " + from + " to " + to, ec.value());
  return OkStatus();
}

uint64_t TreeBytes(const std::string& root) {
  uint64_t total = 0;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(root, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    struct stat st;
    if (lstat(it->path().c_str(), &st) == 0 && S_ISREG(st.st_mode)) {
      total += static_cast<uint64_t>(st.st_size);
    }
  }
  return total;
}

Status NormalizeMtimes(const std::string& root, int64_t epoch) {
  struct timespec times[2];
  times[0].tv_sec = times[1].tv_sec = epoch;
  times[0].tv_nsec = times[1].tv_nsec = 0;
  std::error_code ec;
  std::vector<std::string> paths{root};
  for (auto it = fs::recursive_directory_iterator(root, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    paths.push_back(it->path().string());
  }
  if (ec) return ErrnoError("walk " + root, ec.value());
  for (const auto& p : paths) {
    if (utimensat(AT_FDCWD, p.c_str(), times, AT_SYMLINK_NOFOLLOW) != 0) {
      return ErrnoError("utimensat " + p, errno);
    }
  }
  return OkStatus();
}

std::string DeterministicUuid(std::string_view seed) {
  std::string h = catalog::Sha256Hex(seed).substr(0, 32);
  h[12] = '4';  // version 4 shape
  static const char kVariant[] = "89ab";
  h[16] = kVariant[std::stoi(h.substr(16, 1), nullptr, 16) & 3];
  return h.substr(0, 8) + "-" + h.substr(8, 4) + "-" + h.substr(12, 4) + "-" + h.substr(16, 4) +
         "-" + h.substr(20, 12);
}

namespace {

std::map<std::string, std::string> BuildEnv() {
  return {{"LC_ALL", "C"},
          {"LANG", "C"},
          {"TZ", "UTC"},
          {"SOURCE_DATE_EPOCH", std::to_string(kSourceDateEpoch)},
          {"PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}};
}

}  // namespace

Status RunPostInstall(const std::vector<catalog::PostInstallStep>& steps, const std::string& root) {
  RunOptions opts;
  opts.env_set = BuildEnv();
  for (const auto& step : steps) {
    auto r = RunProcessChecked({"sh", "-e", "-c", step.command, "sh", root}, opts);
    if (!r.ok()) return r.error().WithContext("post-install step '" + step.name + "'");
  }
  return OkStatus();
}

Status MakeExt4(const std::string& root, const std::string& image, const Ext4Options& o) {
  std::error_code ec;
  fs::remove(image, ec);
  RunOptions opts;
  opts.env_set = BuildEnv();
  // mke2fs takes every inode and superblock time from this clock instead of "now".
  opts.env_set["E2FSPROGS_FAKE_TIME"] = std::to_string(o.epoch);
  opts.env_unset = {"MKE2FS_CONFIG", "MKE2FS_SYNC"};
  std::vector<std::string> argv{"mkfs.ext4", "-q", "-F", "-t", "ext4", "-b", "4096", "-I", "256",
                                "-L", o.label, "-U", o.uuid,
                                "-E", "hash_seed=" + o.hash_seed + ",root_owner=0:0,lazy_itable_init=0",
                                "-d", root, image,
                                std::to_string(o.size_bytes / 1024) + "k"};
  RETURN_IF_ERROR(NormalizeMtimes(root, o.epoch));
  auto r = RunProcessChecked(argv, opts);
  if (!r.ok()) return r.error().WithContext("mkfs.ext4 " + image);
  // mkfs.ext4 -d copies the host's ctimes (and atimes touched by reads): reset them in the image.
  return NormalizeExt4Times(image, o.epoch);
}

Status MakeCpio(const std::string& root, const std::string& out, int64_t epoch) {
  RETURN_IF_ERROR(NormalizeMtimes(root, epoch));
  std::vector<std::string> paths;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(root, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    paths.push_back("." + it->path().string().substr(root.size()));
  }
  if (ec) return ErrnoError("walk " + root, ec.value());
  std::sort(paths.begin(), paths.end());
  std::string list = ".\n";
  for (const auto& p : paths) list += p + "\n";
  RunOptions opts;
  opts.cwd = root;
  opts.stdin_data = list;
  opts.env_set = BuildEnv();
  ASSIGN_OR_RETURN(auto r, RunProcessChecked({"cpio", "--reproducible", "--quiet", "-o", "-H",
                                              "newc", "-R", "0:0"},
                                             opts));
  return WriteFile(out, r.out, 0644);
}

Result<std::string> FreshWorkDir(const std::string& out_dir, const std::string& work_dir) {
  std::string work = work_dir.empty() ? out_dir + "/.work" : work_dir;
  RETURN_IF_ERROR(RemoveTree(work));
  RETURN_IF_ERROR(MakeDirs(work));
  RETURN_IF_ERROR(MakeDirs(out_dir));
  return work;
}

Status MakeImageDisk(const std::string& root, const std::string& out_dir, const std::string& name,
                     uint64_t size_bytes) {
  std::string disk = out_dir + "/" + catalog::names::kDiskFile;
  Ext4Options ext4;
  ext4.label = "cloister-root";
  ext4.uuid = DeterministicUuid("cloister-image/" + name + "/uuid");
  ext4.hash_seed = DeterministicUuid("cloister-image/" + name + "/hash");
  ext4.size_bytes = size_bytes;
  return MakeExt4(root, disk, ext4);
}

Result<catalog::ImageEntry> FinishEntry(const std::string& name, const std::string& version,
                                        const std::vector<catalog::PostInstallStep>& steps,
                                        const std::string& out_dir, const std::string& work,
                                        Stages& stages) {
  catalog::ImageEntry entry;
  entry.name = name;
  entry.version = version;
  entry.arch = "amd64";
  entry.kernel_cmdline = protocol::kKernelCmdline;
  entry.post_install = steps;
  RETURN_IF_ERROR(AddArtifactDigests(out_dir, &entry));
  RETURN_IF_ERROR(RemoveTree(work));
  stages.Done("disk sha256 " + entry.artifacts[0].sha256.substr(0, 16) + "...");
  return entry;
}

Status AddArtifactDigests(const std::string& out_dir, catalog::ImageEntry* entry) {
  for (auto [role, file] : {std::pair{catalog::kRoleDisk, catalog::names::kDiskFile},
                            std::pair{catalog::kRoleKernel, catalog::names::kKernelFile},
                            std::pair{catalog::kRoleInitrd, catalog::names::kInitrdFile}}) {
    ASSIGN_OR_RETURN(catalog::FileDigest d, catalog::Sha256File(out_dir + "/" + file));
    entry->artifacts.push_back({role, file, d.size, d.sha256});
  }
  return OkStatus();
}

}  // namespace cloister::image
