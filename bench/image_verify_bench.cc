// `cloister image verify` throughput against `sha256sum` of the same file, side by side in one
// run. Usage: image_verify_bench [MiB] (default 1024). Builds a throwaway store in /tmp holding
// one signed image whose disk is MiB of non-zero data, then times:
//   A: CatalogStore::Resolve(name, Rehash::kYes)  (what `image verify NAME` does: signature,
//      keyring, sizes, SHA-256 of disk + kernel + initrd)
//   B: sha256sum DISK
// and prints seconds per GiB for each and the ratio A/B (best of 3 runs each, interleaved).
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "base/subprocess.h"
#include "catalog/sha256.h"
#include "catalog/store.h"

using namespace cloister;
namespace fs = std::filesystem;

int main(int argc, char** argv) {
  uint64_t mib = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 1024;
  char t[] = "/tmp/cloister-bench-XXXXXX";
  std::string tmp = mkdtemp(t);
  std::string built = tmp + "/built";
  fs::create_directories(built);
  {
    std::ofstream disk(built + "/disk.raw", std::ios::binary);
    std::vector<char> block(1 << 20);
    uint64_t x = 88172645463325252ull;
    for (uint64_t i = 0; i < mib; ++i) {
      for (auto& c : block) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        c = static_cast<char>(x);
      }
      disk.write(block.data(), static_cast<std::streamsize>(block.size()));
    }
    std::ofstream(built + "/vmlinuz") << std::string(8 << 20, 'k');
    std::ofstream(built + "/initrd.img") << std::string(4 << 20, 'i');
  }
  catalog::ImageEntry e;
  e.name = "bench";
  e.version = "1";
  e.arch = "amd64";
  e.kernel_cmdline = "root=/dev/vda rw console=ttyS0";
  for (auto [role, file] : {std::pair{catalog::kRoleDisk, "disk.raw"},
                            std::pair{catalog::kRoleKernel, "vmlinuz"},
                            std::pair{catalog::kRoleInitrd, "initrd.img"}}) {
    auto d = catalog::Sha256File(built + "/" + file);
    if (!d.ok()) return 1;
    e.artifacts.push_back({role, file, d->size, d->sha256});
  }
  catalog::CatalogStore store(tmp + "/store");
  if (auto s = store.PublishLocal(e, built); !s.ok()) {
    std::fprintf(stderr, "publish: %s\n", s.error().ToString().c_str());
    return 1;
  }
  std::string disk = tmp + "/store/images/bench/disk.raw";
  auto secs = [](auto f) {
    auto a = std::chrono::steady_clock::now();
    f();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - a).count();
  };
  double best_a = 1e9, best_b = 1e9;
  for (int i = 0; i < 3; ++i) {
    best_a = std::min(best_a, secs([&] {
      auto r = store.Resolve("bench", catalog::Rehash::kYes);
      if (!r.ok()) std::abort();
    }));
    best_b = std::min(best_b, secs([&] {
      auto r = RunProcess({"sha256sum", disk});
      if (!r.ok() || !r->success()) std::abort();
    }));
  }
  double gib = static_cast<double>(mib) / 1024.0;
  std::printf("image verify bench: disk %llu MiB (+12 MiB kernel/initrd), best of 3\n",
              static_cast<unsigned long long>(mib));
  std::printf("  cloister image verify : %6.2f s/GiB\n", best_a / gib);
  std::printf("  sha256sum             : %6.2f s/GiB\n", best_b / gib);
  std::printf("  ratio verify/sha256sum: %.2f\n", best_a / best_b);
  fs::remove_all(tmp);
  return 0;
}
