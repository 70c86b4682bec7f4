// Store benchmark (not a test): measures side by side, in one run,
//   1. `create` time with base images of 1 GiB and 64 GiB (the ratio shows creation is O(1) in
//      the base size), median of N runs each;
//   2. `checkpoint create` time with home images of 1 GiB and 64 GiB apparent size.
// Usage: store_bench [DIR] [N]   (DIR: where to put the store, default a temp dir under /tmp;
// put it on XFS/btrfs to measure the reflink path).
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

using namespace cloister;
using Clock = std::chrono::steady_clock;

namespace {

double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

void Die(const std::string& what, const Error& e) {
  std::fprintf(stderr, "store_bench: %s: %s\n", what.c_str(), e.ToString().c_str());
  std::exit(1);
}

// A sparse base image: size bytes, with 1 MiB of data at the start (a "boot sector").
void MakeBase(const std::string& path, uint64_t size) {
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0 || ftruncate(fd, static_cast<off_t>(size)) != 0) std::exit(1);
  std::string mb(1 << 20, 'B');
  if (pwrite(fd, mb.data(), mb.size(), 0) != static_cast<ssize_t>(mb.size())) std::exit(1);
  close(fd);
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir;
  if (argc > 1) {
    dir = argv[1];
  } else {
    char tmpl[] = "/tmp/cloister-store-bench.XXXXXX";
    dir = mkdtemp(tmpl);
  }
  int n = argc > 2 ? std::atoi(argv[2]) : 7;
  Env* env = Env::Default();
  std::string root = dir + "/store";
  std::string small = dir + "/base-1g.raw", big = dir + "/base-64g.raw";
  MakeBase(small, 1ull << 30);
  MakeBase(big, 64ull << 30);
  auto store = std::move(Store::Open(root)).value();

  // One-time hash: measured on 1 GiB; seeded for 64 GiB (see the header).
  auto t0 = Clock::now();
  Result<ImageIdentity> id = ResolveImage(env, root + "/" + std::string(layout::kImagesDir), small);
  if (!id.ok()) Die("hash", id.error());
  double hash_ms = Ms(Clock::now() - t0);
  {
    std::string cache_path = root + "/images/" + std::string(layout::kImageHashCacheFile);
    nlohmann::json cache = nlohmann::json::parse(*env->ReadFile(cache_path));
    FileInfo fi = *env->Stat(big);
    cache[big] = {{"size", fi.apparent}, {"mtime_ns", fi.mtime_ns}, {"inode", fi.inode},
                  {"sha256", std::string(64, '0')}};  // not computed: see the header
    if (!env->AtomicWriteFile(cache_path, cache.dump()).ok()) return 1;
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
      format = layout::DiskFormatName(store->LiveDiskPaths(c->name, *c).system.format);
    }
  }
  double ms_small = Median(create_small), ms_big = Median(create_big);
  std::printf("store: %s (system disk: %s)\n", root.c_str(),
              format == "raw" ? "reflink clone" : "qcow2 overlay");
  std::printf("one-time SHA-256 of a 1 GiB base image: %.0f ms (%.0f MiB/s)\n", hash_ms,
              1024.0 / (hash_ms / 1000.0));
  std::printf("create, base 1 GiB : median %7.1f ms (n=%d, 64 GiB sparse home)\n", ms_small, n);
  std::printf("create, base 64 GiB: median %7.1f ms (n=%d)\n", ms_big, n);
  std::printf("ratio create(64 GiB) / create(1 GiB): %.2f  (O(1) in base size if ~1)\n",
              ms_big / ms_small);

  // Checkpoint time at two home sizes, each home holding 64 MiB of written data.
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
        {"qemu-io", "-f", "raw", "-c", "write -q -P 0x42 16M 64M", d.home.path});
    if (!w.ok()) Die("write home", w.error());
    for (int i = 0; i < n; ++i) {
      auto t = Clock::now();
      Result<CheckpointRecord> rec = store->CreateCheckpoint(r.name);
      double ms = Ms(Clock::now() - t);
      if (!rec.ok()) Die("checkpoint", rec.error());
      (is_big ? ck_big : ck_small).push_back(ms);
    }
  }
  std::printf("checkpoint create, home 1 GiB : median %7.1f ms (n=%d)\n", Median(ck_small), n);
  std::printf("checkpoint create, home 64 GiB: median %7.1f ms (n=%d)\n", Median(ck_big), n);
  std::printf("ratio checkpoint(64 GiB home) / checkpoint(1 GiB home): %.2f\n",
              Median(ck_big) / Median(ck_small));
  if (argc <= 1) (void)env->RemoveAll(dir);
  return 0;
}
