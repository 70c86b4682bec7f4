#include "image/oci/testing.h"

#include <archive.h>
#include <archive_entry.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/file_util.h"
#include "catalog/sha256.h"
#include "image/debs.h"

namespace cloister::image::oci::testing {
namespace {

namespace fs = std::filesystem;

struct Member {
  std::string name;
  std::string data;
  mode_t type = AE_IFREG;
  mode_t perm = 0644;
  std::string link;  // symlink target
};

// A reproducible tar of `members` in the order given.
Result<std::string> Tar(const std::vector<Member>& members) {
  std::string out;
  struct archive* a = archive_write_new();
  archive_write_set_format_pax_restricted(a);
  archive_write_set_bytes_in_last_block(a, 1);
  auto write_cb = [](struct archive*, void* user, const void* buf, size_t n) -> la_ssize_t {
    static_cast<std::string*>(user)->append(static_cast<const char*>(buf), n);
    return static_cast<la_ssize_t>(n);
  };
  if (archive_write_open(a, &out, nullptr, write_cb, nullptr) != ARCHIVE_OK) {
    archive_write_free(a);
    return Error(ErrorCode::kInternal, "archive_write_open failed");
  }
  for (const Member& m : members) {
    struct archive_entry* e = archive_entry_new();
    archive_entry_set_pathname(e, m.name.c_str());
    archive_entry_set_filetype(e, m.type);
    archive_entry_set_perm(e, m.perm);
    archive_entry_set_uid(e, 0);
    archive_entry_set_gid(e, 0);
    archive_entry_set_mtime(e, 0, 0);
    if (m.type == AE_IFLNK) archive_entry_set_symlink(e, m.link.c_str());
    archive_entry_set_size(e, m.type == AE_IFREG ? static_cast<la_int64_t>(m.data.size()) : 0);
    archive_write_header(a, e);
    if (m.type == AE_IFREG && !m.data.empty()) archive_write_data(a, m.data.data(), m.data.size());
    archive_entry_free(e);
  }
  archive_write_close(a);
  archive_write_free(a);
  return out;
}

Status Collect(const fs::path& root, const fs::path& rel, std::vector<Member>& out) {
  std::vector<fs::path> names;
  for (const auto& e : fs::directory_iterator(root / rel)) names.push_back(e.path().filename());
  std::sort(names.begin(), names.end());
  for (const fs::path& n : names) {
    fs::path r = rel / n;
    fs::path p = root / r;
    struct stat st;
    if (lstat(p.c_str(), &st) != 0) return ErrnoError("lstat " + p.string(), errno);
    Member m;
    m.name = r.string();
    m.perm = st.st_mode & 07777;
    if (S_ISDIR(st.st_mode)) {
      m.type = AE_IFDIR;
      m.name += "/";
      out.push_back(m);
      RETURN_IF_ERROR(Collect(root, r, out));
    } else if (S_ISLNK(st.st_mode)) {
      m.type = AE_IFLNK;
      m.link = fs::read_symlink(p).string();
      out.push_back(m);
    } else if (S_ISREG(st.st_mode)) {
      ASSIGN_OR_RETURN(m.data, ReadFileBounded(p.string(), 256u << 20, Follow::kNoSymlinks));
      out.push_back(m);
    }
  }
  return OkStatus();
}

std::string Digest(const std::string& bytes) { return "sha256:" + catalog::Sha256Hex(bytes); }

}  // namespace

Status MakeBusyboxRootfs(const std::string& cache_dir, const std::string& dir) {
  ASSIGN_OR_RETURN(std::vector<DebPackage> debs, FetchDebs(cache_dir, {"busybox-static"}));
  std::string extracted = dir + ".deb";
  RETURN_IF_ERROR(ExtractDeb(debs[0].path, extracted));
  for (const char* d : {"bin", "etc", "tmp", "root"}) fs::create_directories(fs::path(dir) / d);
  fs::copy_file(extracted + "/bin/busybox", dir + "/bin/busybox", fs::copy_options::overwrite_existing);
  fs::remove_all(extracted);
  chmod((dir + "/bin/busybox").c_str(), 0755);
  chmod((dir + "/tmp").c_str(), 01777);
  for (const char* applet : {"sh",   "ls",    "cat",  "echo",  "mkdir", "chmod",    "cp",   "mv",
                             "rm",   "tar",   "grep", "sed",   "env",   "id",       "printf",
                             "sleep", "test", "[",    "wc",    "stat",  "head",     "tail", "tr",
                             "touch", "sync", "ps",   "kill",  "date",  "find",     "awk",  "cut",
                             "ln",   "true",  "false", "sort", "uname", "basename", "dirname"}) {
    fs::create_symlink("busybox", fs::path(dir) / "bin" / applet);
  }
  RETURN_IF_ERROR(WriteFile(dir + "/etc/passwd", "root:x:0:0:root:/root:/bin/sh\n", 0644));
  RETURN_IF_ERROR(WriteFile(dir + "/etc/group", "root:x:0:\n", 0644));
  return OkStatus();
}

Result<std::string> WriteOciArchive(const std::string& rootfs, const std::string& out,
                                    const std::map<std::string, std::string>& env,
                                    const std::string& tag) {
  std::vector<Member> files;
  RETURN_IF_ERROR(Collect(rootfs, "", files));
  ASSIGN_OR_RETURN(std::string layer, Tar(files));
  nlohmann::json envs = nlohmann::json::array();
  for (const auto& [k, v] : env) envs.push_back(k + "=" + v);
  std::string config = nlohmann::json{
      {"architecture", "amd64"},
      {"os", "linux"},
      {"config", {{"Env", envs}}},
      {"rootfs", {{"type", "layers"}, {"diff_ids", {Digest(layer)}}}}}.dump();
  std::string manifest = nlohmann::json{
      {"schemaVersion", 2},
      {"mediaType", "application/vnd.oci.image.manifest.v1+json"},
      {"config", {{"mediaType", "application/vnd.oci.image.config.v1+json"},
                  {"digest", Digest(config)}, {"size", config.size()}}},
      {"layers", {{{"mediaType", "application/vnd.oci.image.layer.v1.tar"},
                   {"digest", Digest(layer)}, {"size", layer.size()}}}}}.dump();
  std::string index = nlohmann::json{
      {"schemaVersion", 2},
      {"manifests", {{{"mediaType", "application/vnd.oci.image.manifest.v1+json"},
                      {"digest", Digest(manifest)},
                      {"size", manifest.size()},
                      {"annotations", {{"org.opencontainers.image.ref.name", tag}}}}}}}.dump();
  std::vector<Member> layout = {
      {"blobs/", "", AE_IFDIR, 0755, ""},
      {"blobs/sha256/", "", AE_IFDIR, 0755, ""},
      {"blobs/sha256/" + Digest(layer).substr(7), layer, AE_IFREG, 0644, ""},
      {"blobs/sha256/" + Digest(config).substr(7), config, AE_IFREG, 0644, ""},
      {"blobs/sha256/" + Digest(manifest).substr(7), manifest, AE_IFREG, 0644, ""},
      {"index.json", index, AE_IFREG, 0644, ""},
      {"oci-layout", R"({"imageLayoutVersion":"1.0.0"})", AE_IFREG, 0644, ""},
  };
  ASSIGN_OR_RETURN(std::string tar, Tar(layout));
  RETURN_IF_ERROR(WriteFile(out, tar, 0644));
  return Digest(manifest);
}

}  // namespace cloister::image::oci::testing
