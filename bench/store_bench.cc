// Store benchmark (not a test): measures side by side, in one run,
//   1. `create` time with base images of 1 GiB and 64 GiB (the ratio shows creation is O(1) in
//      the base size), median of N runs each;
//   2. `checkpoint create` time with home images of 1 GiB and 64 GiB apparent size.
// Usage: store_bench [--smoke] [--markdown] [DIR] [N]   (--markdown: also print the section of
// docs/benchmarks.md, bench/report.h; DIR: where to put the store, default a temp dir under
// /tmp; put it on XFS/btrfs to measure the reflink path).
//
// Checked after the timing: the image hash equals sha256sum's; each workspace's config records
// the base's digest and its system disk is there with the base's size; each home keeps all its
// checkpoints and still reads back the data written before them (qemu-io, through the overlays).
// A failure exits 1 with the reason on stderr.
// --smoke: N = 2 (the first checkpoint of a raw home and one over a qcow2 top), a 16 MiB small
// base instead of 1 GiB and 4 MiB written per home; seconds (scripts/bench-smoke.sh).
//
// The base image's SHA-256 is a one-time cost per image file (cached by the store; the catalog
// will provide it from the signed catalog). Hashing 64 GiB would dominate this run, so the bench
// measures the hash rate on the 1 GiB image and seeds the cache entry of the 64 GiB one with a
// dummy digest (the bench's workspaces are thrown away).
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/strings.h"
#include "base/subprocess.h"
#include "store/image_ref.h"
#include "store/layout.h"
#include "store/store.h"
#include "report.h"

using namespace cloister;
using Clock = std::chrono::steady_clock;

namespace {

double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

std::string g_temp_dir;  // the default temp dir, removed on a failure too

[[noreturn]] void Exit1() {
  if (!g_temp_dir.empty()) (void)Env::Default()->RemoveAll(g_temp_dir);
  std::exit(1);
}

void Die(const std::string& what, const Error& e) {
  std::fprintf(stderr, "store_bench: %s: %s\n", what.c_str(), e.ToString().c_str());
  Exit1();
}

[[noreturn]] void Fail(const std::string& what) {
  std::fprintf(stderr, "store_bench: FAILED: %s\n", what.c_str());
  Exit1();
}

// A sparse base image: size bytes, with 1 MiB of data at the start (a "boot sector").
void MakeBase(const std::string& path, uint64_t size) {
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0 || ftruncate(fd, static_cast<off_t>(size)) != 0) Fail("making " + path);
  std::string mb(1 << 20, 'B');
  if (pwrite(fd, mb.data(), mb.size(), 0) != static_cast<ssize_t>(mb.size())) {
    Fail("writing " + path);
  }
  close(fd);
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir;
  int n = 7;
  bool smoke = false;
  std::vector<std::string> positional;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--smoke") {
      smoke = true;
    } else if (a == "--markdown") {
    } else if (!a.empty() && a[0] != '-') {
      positional.push_back(a);
    } else {
      std::fprintf(stderr, "usage: store_bench [--smoke] [--markdown] [DIR] [N]   (--smoke: N=2, a "
                           "16 MiB small base, 4 MiB per home; exits 1 when a path fails)\n");
      return 2;
    }
  }
  if (smoke) n = 2;
  if (positional.size() > 1) n = std::max(1, std::atoi(positional[1].c_str()));
  bool temp_dir = positional.empty();
  if (!temp_dir) {
    dir = positional[0];
  } else {
    char tmpl[] = "/tmp/cloister-store-bench.XXXXXX";
    if (!mkdtemp(tmpl)) Fail("mkdtemp under /tmp");
    dir = tmpl;
    g_temp_dir = dir;
  }
  Env* env = Env::Default();
  std::string root = dir + "/store";
  const uint64_t small_size = smoke ? 16ull << 20 : 1ull << 30;
  const std::string small_label = smoke ? "16 MiB" : "1 GiB";
  const uint64_t home_write = smoke ? 4ull << 20 : 64ull << 20;
  std::string small = dir + "/base-1g.raw", big = dir + "/base-64g.raw";
  MakeBase(small, small_size);
  MakeBase(big, 64ull << 30);
  auto opened = Store::Open(root);
  if (!opened.ok()) Fail("open store " + root + ": " + opened.error().ToString());
  auto store = std::move(*opened);

  // One-time hash: measured on 1 GiB; seeded for 64 GiB (see the header).
  auto t0 = Clock::now();
  Result<ImageIdentity> id = ResolveImage(env, root + "/" + std::string(layout::kImagesDir), small);
  if (!id.ok()) Die("hash", id.error());
  double hash_ms = Ms(Clock::now() - t0);
  {
    Result<RunOutput> sum = RunProcessChecked({"sha256sum", small});
    if (!sum.ok()) Fail("sha256sum " + small + ": " + sum.error().ToString());
    std::string want = sum->out.substr(0, sum->out.find(' '));
    if (id->sha256 != want) Fail("image hash " + id->sha256 + ", sha256sum says " + want);
  }
  {
    std::string cache_path = root + "/images/" + std::string(layout::kImageHashCacheFile);
    auto text = env->ReadFile(cache_path);
    if (!text.ok()) Fail("no image hash cache: " + text.error().ToString());
    nlohmann::json cache = nlohmann::json::parse(*text);
    auto stat = env->Stat(big);
    if (!stat.ok()) Fail("stat " + big + ": " + stat.error().ToString());
    FileInfo fi = *stat;
    cache[big] = {{"size", fi.apparent}, {"mtime_ns", fi.mtime_ns}, {"inode", fi.inode},
                  {"sha256", std::string(64, '0')}};  // not computed: see the header
    if (!env->AtomicWriteFile(cache_path, cache.dump()).ok()) Fail("writing " + cache_path);
  }

  std::vector<double> create_small, create_big;
  std::string format;
  for (int i = 0; i < n; ++i) {
    for (bool is_big : {false, true}) {
      CreateRequest r;
      r.name = std::string(is_big ? "big" : "small") + std::to_string(i);
      r.image = is_big ? big : small;
      auto t = Clock::now();
      Result<WorkspaceConfig> c = store->Create(r);
      double ms = Ms(Clock::now() - t);
      if (!c.ok()) Die("create", c.error());
      (is_big ? create_big : create_small).push_back(ms);
      LiveDisk sys = store->LiveDiskPaths(c->name, *c).system;
      format = layout::DiskFormatName(sys.format);
      // Untimed: the workspace records the base's digest and has a system disk of its size.
      std::string want = is_big ? std::string(64, '0') : id->sha256;
      if (c->image.sha256 != want) {
        Fail("create " + r.name + ": recorded digest " + c->image.sha256);
      }
      uint64_t base_size = is_big ? 64ull << 30 : small_size;
      if (sys.path.empty() || access(sys.path.c_str(), R_OK) != 0 ||
          sys.virtual_size != base_size) {
        Fail("create " + r.name + ": system disk '" + sys.path + "' missing or not " +
             std::to_string(base_size) + " bytes (" + std::to_string(sys.virtual_size) + ")");
      }
    }
  }
  double ms_small = Median(create_small), ms_big = Median(create_big);
  std::printf("store: %s (system disk: %s)\n", root.c_str(),
              format == "raw" ? "reflink clone" : "qcow2 overlay");
  std::printf("one-time SHA-256 of a %s base image: %.0f ms (%.0f MiB/s)\n", small_label.c_str(),
              hash_ms, static_cast<double>(small_size >> 20) / (hash_ms / 1000.0));
  std::printf("create, base %s : median %7.1f ms (n=%d, 64 GiB sparse home)\n",
              small_label.c_str(), ms_small, n);
  std::printf("create, base 64 GiB: median %7.1f ms (n=%d)\n", ms_big, n);
  std::printf("ratio create(64 GiB) / create(%s): %.2f  (O(1) in base size if ~1)\n",
              small_label.c_str(), ms_big / ms_small);

  // Checkpoint time at two home sizes, each home holding 64 MiB (--smoke: 4 MiB) of written data.
  const std::string pattern_cmd = "-P 0x42 16M " + std::to_string(home_write >> 20) + "M";
  std::vector<double> ck_small, ck_big;
  for (bool is_big : {false, true}) {
    CreateRequest r;
    r.name = is_big ? "ck-big" : "ck-small";
    r.image = small;
    r.home_size = is_big ? 64ull << 30 : 1ull << 30;
    Result<WorkspaceConfig> c = store->Create(r);
    if (!c.ok()) Die("create", c.error());
    LiveDisks d = store->LiveDiskPaths(r.name, *c);
    Result<RunOutput> w = RunProcessChecked(
        {"qemu-io", "-f", "raw", "-c", "write -q " + pattern_cmd, d.home.path});
    if (!w.ok()) Die("write home", w.error());
    for (int i = 0; i < n; ++i) {
      auto t = Clock::now();
      Result<CheckpointRecord> rec = store->CreateCheckpoint(r.name);
      double ms = Ms(Clock::now() - t);
      if (!rec.ok()) Die("checkpoint", rec.error());
      (is_big ? ck_big : ck_small).push_back(ms);
      if (rec->id.empty() || rec->home.empty()) {
        Fail("checkpoint " + r.name + ": no id or home layer");
      }
    }
    // Untimed: every checkpoint is listed, and the live home (now an overlay over them) still
    // holds the data written before the first one.
    auto list = store->ListCheckpoints(r.name);
    if (!list.ok()) Die("list checkpoints", list.error());
    if (list->size() != static_cast<size_t>(n)) {
      Fail(r.name + ": " + std::to_string(list->size()) + " checkpoints listed, not " +
           std::to_string(n));
    }
    auto now = store->LoadConfig(r.name);
    if (!now.ok()) Die("load config", now.error());
    LiveDisk home = store->LiveDiskPaths(r.name, *now).home;
    Result<RunOutput> rd = RunProcess({"qemu-io", "-r", "-f", layout::DiskFormatName(home.format),
                                       "-c", "read -q " + pattern_cmd, home.path});
    if (!rd.ok() || !rd->success() || !rd->out.empty()) {
      Fail(r.name + ": the home no longer holds its data after " + std::to_string(n) +
           " checkpoint(s): qemu-io: " + (rd.ok() ? rd->out + rd->err : rd.error().ToString()));
    }
  }
  std::printf("checkpoint create, home 1 GiB : median %7.1f ms (n=%d)\n", Median(ck_small), n);
  std::printf("checkpoint create, home 64 GiB: median %7.1f ms (n=%d)\n", Median(ck_big), n);
  std::printf("ratio checkpoint(64 GiB home) / checkpoint(1 GiB home): %.2f\n",
              Median(ck_big) / Median(ck_small));
  if (temp_dir) (void)env->RemoveAll(dir);
  if (smoke) {
    std::printf("store_bench: smoke OK (digests, disks, checkpoints and home data checked)\n");
  }
  if (cloister::bench::Report::Wanted(argc, argv)) {
    using cloister::bench::Num;
    cloister::bench::Report r(
        "store_bench",
        "`create` with a small and a 64 GiB base image, and `checkpoint create` with a 1 GiB and a "
        "64 GiB home (each holding the same written data), median of N each: both must be O(1) in "
        "the disk's size (ratio near 1).",
        {"operation", "median", "ratio"});
    r.Row({"create, base " + small_label, Num("%.1f ms", ms_small), "1.00"});
    r.Row({"create, base 64 GiB", Num("%.1f ms", ms_big), Num("%.2f", ms_big / ms_small)});
    r.Row({"checkpoint create, home 1 GiB", Num("%.1f ms", Median(ck_small)), "1.00"});
    r.Row({"checkpoint create, home 64 GiB", Num("%.1f ms", Median(ck_big)),
           Num("%.2f", Median(ck_big) / Median(ck_small))});
    r.Note(Num("N = %d; system disk: %s; the one-time SHA-256 of the %s base took %.0f ms.", n,
               format == "raw" ? "reflink clone" : "qcow2 overlay", small_label.c_str(), hash_ms));
    r.Print(argc, argv);
  }
  return 0;
}
