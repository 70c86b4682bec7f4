// The TCG CPU model, side by side in one run: QEMU's "max" against cloister's kTcgCpuModel
// ("max" without the ERMS/FSRM fast-string hints, vm/qemu_args.h). For each round and model, a
// fresh workspace on the test image boots under TCG (CLOISTER_TCG_CPU picks the model), then runs
// guest workloads through `cloister exec`, each timed on the host:
//   write  dd 256 MiB of zeros into the home disk, fsync'd
//   read   the same file back after dropping the page cache
//   zlib   32 MiB of random bytes through gzip -1 | gunzip | sha256sum (busybox)
//   node   Node: gzip and gunzip 16 MiB twice, and its sha512 (what npm does to a tarball)
// Models alternate within a round so load drifts hit both. Prints per-phase medians and the
// ratio max / default (above 1: the default is faster).
//
// Usage: tcg_cpu_bench IMAGE_DIR [--runs N]   (IMAGE_DIR: `cloister image build --test`'s output,
// or BUILD/test-cache/image-test after the VM tests ran); needs the `cloister` binary beside it
// in the build tree (or CLOISTER_EXE).
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "base/subprocess.h"
#include "supervisor/launcher.h"
#include "vm/qemu_args.h"

using namespace cloister;
using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

namespace {

const std::vector<std::pair<std::string, std::string>> kPhases = {
    {"write", "dd if=/dev/zero of=/home/dev/z bs=1M count=256 conv=fsync 2>/dev/null"},
    {"read", "sync; echo 3 > /proc/sys/vm/drop_caches; cat /home/dev/z > /dev/null"},
    {"zlib", "dd if=/dev/urandom bs=1M count=32 2>/dev/null | gzip -1 | gunzip | sha256sum >/dev/null"},
    {"node",
     "node -e \"const z=require('zlib'),c=require('crypto');let b=c.randomBytes(16<<20);"
     "for(let i=0;i<2;i++)b=z.gunzipSync(z.gzipSync(b,{level:1}));"
     "c.createHash('sha512').update(b).digest()\""},
};

double Median(std::vector<double> v) {
  if (v.empty()) return -1;
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

struct Cloister {
  std::string exe, store;
  Result<RunOutput> Run(std::vector<std::string> args, const std::string& cpu) const {
    args.insert(args.begin(), {exe, "--store", store});
    RunOptions o;
    o.timeout = std::chrono::minutes(10);
    o.env_set = {{"CLOISTER_TCG_CPU", cpu}};
    return RunProcess(args, o);
  }
};

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << "usage: tcg_cpu_bench IMAGE_DIR [--runs N]\n";
    return 2;
  }
  std::string image = fs::absolute(argv[1]).string() + "/disk.raw";
  int runs = 2;
  for (int i = 2; i + 1 < argc; i += 2) {
    if (std::string(argv[i]) == "--runs") runs = std::max(1, std::atoi(argv[i + 1]));
  }
  auto exe = vm::CloisterExecutable();
  if (!exe.ok()) {
    std::cerr << exe.error().ToString() << "\n";
    return 1;
  }
  char tmpl[] = "/tmp/cloister-tcgbench-XXXXXX";
  Cloister c{*exe, mkdtemp(tmpl)};
  const std::vector<std::string> models = {"max", vm::kTcgCpuModel};
  std::map<std::string, std::map<std::string, std::vector<double>>> secs;  // model -> phase -> s
  std::cout << "tcg_cpu_bench: " << runs << " round(s), image " << image << "\n";
  int failures = 0;
  for (int r = 0; r < runs; ++r) {
    for (size_t k = 0; k < models.size(); ++k) {
      // Alternate which model goes first, so a trend in the machine's load hits both.
      const std::string& model = models[(k + static_cast<size_t>(r)) % models.size()];
      std::string name = "b" + std::to_string(r) + "-" + std::to_string(k);
      auto created = c.Run({"create", name, "--image", image, "--memory", "1024"}, model);
      if (!created.ok() || !created->success()) {
        std::cerr << "create failed: " << (created.ok() ? created->err : created.error().ToString());
        return 1;
      }
      auto t0 = Clock::now();
      auto started = c.Run({"start", name, "--accel", "tcg"}, model);
      if (!started.ok() || !started->success()) {
        std::cerr << "start failed: " << (started.ok() ? started->err : started.error().ToString());
        return 1;
      }
      secs[model]["boot"].push_back(std::chrono::duration<double>(Clock::now() - t0).count());
      std::printf("round %d, -cpu %s: boot %.1f s", r + 1, model.c_str(), secs[model]["boot"].back());
      for (const auto& [phase, script] : kPhases) {
        auto p0 = Clock::now();
        auto out = c.Run({"exec", name, "-u", "root", "--", "sh", "-c", script}, model);
        double s = std::chrono::duration<double>(Clock::now() - p0).count();
        if (!out.ok() || !out->success()) {
          ++failures;
          std::printf(", %s FAILED", phase.c_str());
          std::cerr << (out.ok() ? out->err : out.error().ToString()) << "\n";
          continue;
        }
        secs[model][phase].push_back(s);
        std::printf(", %s %.1f s", phase.c_str(), s);
      }
      std::printf("\n");
      std::fflush(stdout);
      (void)c.Run({"stop", name, "--force"}, model);
      (void)c.Run({"rm", name, "-f"}, model);
    }
  }
  fs::remove_all(c.store);
  std::printf("\nmedians (s)     %-10s %-24s ratio max/default\n", "max", vm::kTcgCpuModel);
  std::vector<std::string> phases = {"boot"};
  for (const auto& [phase, script] : kPhases) phases.push_back(phase);
  double total_a = 0, total_b = 0;
  for (const auto& phase : phases) {
    double a = Median(secs["max"][phase]), b = Median(secs[vm::kTcgCpuModel][phase]);
    if (phase != "boot") {
      total_a += a;
      total_b += b;
    }
    std::printf("%-15s %-10.2f %-24.2f %.2f\n", phase.c_str(), a, b, b > 0 ? a / b : 0.0);
  }
  std::printf("%-15s %-10.2f %-24.2f %.2f\n", "workload", total_a, total_b,
              total_b > 0 ? total_a / total_b : 0.0);
  return failures ? 1 : 0;
}
