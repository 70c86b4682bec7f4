// `cloister image verify` throughput against `sha256sum` of the same file, side by side in one
// run. Usage: image_verify_bench [--smoke] [--markdown] [MiB] (default 1024; --markdown: also
// print the section of docs/benchmarks.md, bench/report.h). Builds a throwaway store in /tmp
// holding one signed image whose disk is MiB of non-zero data, then times:
//   A: CatalogStore::Resolve(name, Rehash::kYes)  (what `image verify NAME` does: signature,
//      keyring, sizes, SHA-256 of disk + kernel + initrd)
//   B: sha256sum DISK
// and prints seconds per GiB for each and the ratio A/B (best of 3 runs each, interleaved).
// Checked after the timing: every verify succeeded and reported the disk's digest, sha256sum
// printed the same digest, and a verify after one byte of the disk is flipped fails. A failure
// exits 1 with the reason on stderr.
// --smoke: a 4 MiB disk (well under a second), the same checks (scripts/bench-smoke.sh).
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "base/subprocess.h"
#include "catalog/sha256.h"
#include "catalog/store.h"
#include "report.h"

using namespace cloister;
namespace fs = std::filesystem;

int main(int argc, char** argv) {
  uint64_t mib = 1024;
  bool smoke = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--smoke") {
      smoke = true;
      mib = 4;
    } else if (a == "--markdown") {
    } else if (!a.empty() && std::isdigit(static_cast<unsigned char>(a[0])) &&
               std::strtoull(argv[i], nullptr, 10) > 0) {
      mib = std::strtoull(argv[i], nullptr, 10);
    } else {
      std::fprintf(stderr, "usage: image_verify_bench [--smoke] [--markdown] [MiB]   (default 1024; "
                           "--smoke: 4 MiB, exits 1 when a path fails)\n");
      return 2;
    }
  }
  char t[] = "/tmp/cloister-bench-XXXXXX";
  if (!mkdtemp(t)) {
    std::perror("image_verify_bench: mkdtemp");
    return 1;
  }
  std::string tmp = t;
  auto fail = [&](const std::string& what) {
    std::fprintf(stderr, "image_verify_bench: FAILED: %s\n", what.c_str());
    std::error_code ec;
    fs::remove_all(tmp, ec);
    std::exit(1);
  };
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
    if (!disk.flush()) fail("writing " + built + "/disk.raw");
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
    if (!d.ok()) fail(std::string("hashing ") + file + ": " + d.error().ToString());
    e.artifacts.push_back({role, file, d->size, d->sha256});
  }
  catalog::CatalogStore store(tmp + "/store");
  if (auto s = store.PublishLocal(e, built); !s.ok()) fail("publish: " + s.error().ToString());
  const std::string& disk_sha = e.artifacts[0].sha256;
  std::string disk = tmp + "/store/images/bench/disk.raw";
  auto secs = [](auto f) {
    auto a = std::chrono::steady_clock::now();
    f();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - a).count();
  };
  double best_a = 1e9, best_b = 1e9;
  std::string verified_sha, sum_out;
  for (int i = 0; i < 3; ++i) {
    best_a = std::min(best_a, secs([&] {
      auto r = store.Resolve("bench", catalog::Rehash::kYes);
      if (!r.ok()) fail("image verify: " + r.error().ToString());
      verified_sha = r->sha256;
    }));
    best_b = std::min(best_b, secs([&] {
      auto r = RunProcess({"sha256sum", disk});
      if (!r.ok() || !r->success()) {
        fail("sha256sum " + disk + ": " + (r.ok() ? r->err : r.error().ToString()));
      }
      sum_out = r->out;
    }));
  }
  if (verified_sha != disk_sha) {
    fail("image verify reported disk digest '" + verified_sha + "', not " + disk_sha);
  }
  if (sum_out.substr(0, sum_out.find(' ')) != disk_sha) {
    fail("sha256sum printed '" + sum_out + "', not " + disk_sha);
  }
  {
    // Verify must re-hash: one flipped byte in the middle of the disk is refused.
    std::fstream f(disk, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(static_cast<std::streamoff>(mib << 19));
    char c = 0;
    f.read(&c, 1);
    c = static_cast<char>(c ^ 1);
    f.seekp(static_cast<std::streamoff>(mib << 19));
    f.write(&c, 1);
    f.close();
    if (!f) fail("flipping a byte of " + disk);
    if (store.Resolve("bench", catalog::Rehash::kYes).ok()) {
      fail("image verify accepts a corrupted disk");
    }
  }
  double gib = static_cast<double>(mib) / 1024.0;
  std::printf("image verify bench: disk %llu MiB (+12 MiB kernel/initrd), best of 3\n",
              static_cast<unsigned long long>(mib));
  std::printf("  cloister image verify : %6.2f s/GiB\n", best_a / gib);
  std::printf("  sha256sum             : %6.2f s/GiB\n", best_b / gib);
  std::printf("  ratio verify/sha256sum: %.2f\n", best_a / best_b);
  fs::remove_all(tmp);
  if (smoke) {
    std::printf("image_verify_bench: smoke OK (verify agrees with sha256sum, refuses a flipped "
                "byte)\n");
  }
  if (bench::Report::Wanted(argc, argv)) {
    bench::Report r("image_verify_bench",
                    "`cloister image verify` (signature, keyring, sizes, SHA-256 of disk, kernel "
                    "and initramfs) against `sha256sum` of the same disk, best of 3 each, "
                    "interleaved; a verify after one flipped byte must fail.",
                    {"path", "s/GiB", "ratio"});
    r.Row({"cloister image verify", bench::Num("%.2f", best_a / gib),
           bench::Num("%.2f", best_a / best_b)});
    r.Row({"sha256sum", bench::Num("%.2f", best_b / gib), "1.00"});
    r.Note(bench::Num("Disk %llu MiB (+12 MiB kernel and initramfs).",
                      static_cast<unsigned long long>(mib)));
    r.Print(argc, argv);
  }
  return 0;
}
