#include "store/test_util.h"

#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "base/subprocess.h"
#include "store/mac.h"

namespace cloister::testing {

TempDir::TempDir() {
  std::string tmpl = "/tmp/cloister-store-test.XXXXXX";
  char* p = mkdtemp(tmpl.data());
  EXPECT_NE(p, nullptr);
  path_ = tmpl;
}

TempDir::~TempDir() {
  Status s = Env::Default()->RemoveAll(path_);
  (void)s;
}

void MakeBaseImage(const std::string& path, uint64_t size, char fill) {
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, static_cast<off_t>(size)), 0);
  std::string chunk(64 << 10, fill);
  for (uint64_t off = 0; off < std::min<uint64_t>(size, 8 << 20); off += 1 << 20) {
    ASSERT_EQ(pwrite(fd, chunk.data(), chunk.size(), static_cast<off_t>(off)),
              static_cast<ssize_t>(chunk.size()));
  }
  close(fd);
}

void GuestWrite(const std::string& path, layout::DiskFormat format, uint64_t offset, uint64_t len,
                int pattern) {
  Result<RunOutput> r = RunProcessChecked(
      {"qemu-io", "-f", layout::DiskFormatName(format), "-c",
       "write -q -P " + std::to_string(pattern) + " " + std::to_string(offset) + " " +
           std::to_string(len),
       path});
  ASSERT_TRUE(r.ok()) << r.error().ToString();
}

void GuestWriteBytes(const std::string& path, layout::DiskFormat format, uint64_t offset,
                     const std::string& data) {
  TempDir t;
  std::string src = t.Sub("data");
  ASSERT_TRUE(Env::Default()->WriteFile(src, data).ok());
  Result<RunOutput> r = RunProcessChecked(
      {"qemu-io", "-f", layout::DiskFormatName(format), "-c",
       "write -q -s " + src + " " + std::to_string(offset) + " " + std::to_string(data.size()),
       path});
  ASSERT_TRUE(r.ok()) << r.error().ToString();
}

bool GuestReads(const std::string& path, layout::DiskFormat format, uint64_t offset, uint64_t len,
                int pattern) {
  Result<RunOutput> r = RunProcess(
      {"qemu-io", "-r", "-f", layout::DiskFormatName(format), "-c",
       "read -q -P " + std::to_string(pattern) + " " + std::to_string(offset) + " " +
           std::to_string(len),
       path});
  if (!r.ok() || !r->success()) return false;
  return r->out.find("Pattern verification failed") == std::string::npos &&
         r->err.find("Pattern verification failed") == std::string::npos;
}

bool SameGuestView(const std::string& a, layout::DiskFormat fa, const std::string& b,
                   layout::DiskFormat fb) {
  Result<RunOutput> r = RunProcess({"qemu-img", "compare", "-q", "-U", "-f",
                                    layout::DiskFormatName(fa), "-F", layout::DiskFormatName(fb),
                                    a, b});
  return r.ok() && r->exit_code == 0;
}

std::string BackingOf(const std::string& path) {
  Result<RunOutput> r = RunProcessChecked({"qemu-img", "info", "-U", "--output=json", path});
  if (!r.ok()) return "<error: " + r.error().ToString() + ">";
  nlohmann::json j = nlohmann::json::parse(r->out, nullptr, false);
  if (j.is_discarded()) return "<bad json>";
  return j.value("backing-filename", std::string());
}

int64_t CountRegularFiles(const std::string& dir) {
  Env* env = Env::Default();
  Result<std::vector<std::string>> names = env->ListDir(dir);
  if (!names.ok()) return 0;
  int64_t n = 0;
  for (const std::string& name : *names) {
    Result<FileInfo> fi = env->Stat(dir + "/" + name);
    if (!fi.ok()) continue;
    if (fi->is_dir) n += CountRegularFiles(dir + "/" + name);
    else ++n;
  }
  return n;
}

std::string CheckStore(const std::string& root, bool no_garbage) {
  Env* env = Env::Default();
  auto store = Store::Open(root);
  if (!store.ok()) return store.error().ToString();
  auto list = (*store)->List();
  if (!list.ok()) return "List: " + list.error().ToString();
  MacRegistry registry(env, root + "/" + std::string(layout::kMacRegistryFile));
  auto macs = registry.Load();
  if (!macs.ok()) return "MAC registry: " + macs.error().ToString();
  std::set<std::string> ids;
  for (const WorkspaceSummary& s : *list) {
    if (!s.problem.empty()) return s.name + ": " + s.problem;
    const WorkspaceConfig& c = *s.config;
    ids.insert(c.id);
    WorkspacePaths p = (*store)->Paths(s.name);
    for (const DiskLayer& l : c.layers) {
      std::string path = p.dir + "/" + l.file;
      if (!env->Exists(path)) return s.name + ": missing layer " + l.file;
      std::string want;
      if (l.on_base) want = c.image.path;
      else if (!l.backing.empty()) want = p.dir + "/" + l.backing;
      if (l.format == layout::DiskFormat::kQcow2 || !want.empty()) {
        std::string got = BackingOf(path);
        // Between a merge's `qemu-img rebase` and its config commit, a layer already reads
        // through the layer below its recorded backing (same guest view; the next verb commits
        // it). Allowed only in the after-crash check.
        std::string below;
        if (const DiskLayer* b = c.FindLayer(l.backing)) {
          below = b->on_base ? c.image.path : (b->backing.empty() ? "" : p.dir + "/" + b->backing);
        }
        bool mid_merge = !no_garbage && !l.backing.empty() && got == below;
        if (got != want && !mid_merge) {
          return s.name + ": " + l.file + " backing is '" + got + "', config says '" + want + "'";
        }
      }
    }
    if (c.home_top.empty()) return s.name + ": no home";
    bool mac_ok = false;
    for (const MacEntry& e : *macs) mac_ok |= e.mac == c.mac && e.id == c.id;
    if (!mac_ok) return s.name + ": MAC " + c.mac + " not reserved for it";
    if (!no_garbage) continue;
    std::set<std::string> refs;
    for (const DiskLayer& l : c.layers) refs.insert(l.file);
    auto names = env->ListDir(p.dir);
    for (const std::string& n : *names) {
      bool disk = n.rfind("system.", 0) == 0 || n.rfind("home.", 0) == 0;
      if (disk && !refs.count(n)) return s.name + ": garbage file " + n;
      if (n.find(".tmp") != std::string::npos) return s.name + ": garbage temp " + n;
    }
    if (env->Exists(p.checkpoints_dir)) {
      std::vector<std::string> ckpts = *env->ListDir(p.checkpoints_dir);
      for (const std::string& id : ckpts) {
        std::vector<std::string> files = *env->ListDir(p.checkpoints_dir + "/" + id);
        for (const std::string& f : files) {
          if (!refs.count("checkpoints/" + id + "/" + f)) {
            return s.name + ": garbage checkpoint file " + id + "/" + f;
          }
        }
      }
    }
  }
  if (no_garbage) {
    for (const char* d : {"staging", "trash"}) {
      auto names = env->ListDir(root + "/" + d);
      if (names.ok() && !names->empty()) return std::string(d) + "/ not empty: " + names->front();
    }
    for (const MacEntry& e : *macs) {
      if (!ids.count(e.id)) return "MAC " + e.mac + " reserved for a missing workspace";
    }
  }
  return "";
}

}  // namespace cloister::testing
