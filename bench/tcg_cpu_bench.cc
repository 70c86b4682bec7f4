// The TCG CPU model, side by side in one run: QEMU's "max" against cloister's kTcgCpuModel
// ("max" without the ERMS/FSRM fast-string hints, vm/qemu_args.h). For each round and model, a
// fresh workspace on the test image boots under TCG (CLOISTER_TCG_CPU picks the model), then runs
// guest workloads through `cloister exec`, each timed on the host:
//   write  dd 256 MiB of zeros into the home disk, fsync'd
//   read   the same file back after dropping the page cache
//   zlib   32 MiB of random bytes through gzip -1 | gunzip | sha256sum (busybox)
//   node   Node: gzip and gunzip 16 MiB twice, and its sha512 (what npm does to a tarball)
// Models alternate within a round so load drifts hit both. Prints per-phase medians and the
// ratio max / default (above 1: the default is faster). After each boot (untimed) the guest's
// /proc/cpuinfo must show the model asked for: ERMS under "max", none under the default.
//
// Usage: tcg_cpu_bench [IMAGE_DIR] [--runs N] [--smoke] [--markdown]
//   --markdown: also print the section of docs/benchmarks.md (bench/report.h).
//   IMAGE_DIR: `cloister image build --test`'s output; default the build tree's test image
//   (BUILD/test-cache/image-test, there after the VM tests ran). Needs the `cloister` binary
//   beside it in the build tree (or CLOISTER_EXE).
//   --smoke: one round, both models, 512 MiB guests and tiny workloads (write/read 8 MiB, zlib
//   2 MiB, node 1 MiB) whose results are checked in the guest (file sizes, the gzip round trip's
//   digest, node's round trip); under a minute on 2 idle cores. Exits 1 with the reason on stderr
//   when a boot, a workload or a check fails (scripts/bench-smoke.sh).
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

#include "base/strings.h"
#include "base/subprocess.h"
#include "bench/vm_bench_util.h"
#include "supervisor/launcher.h"
#include "vm/qemu_args.h"
#include "report.h"

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

// --smoke: the same workloads at tiny sizes, each printing what proves it worked (`expect`,
// compared with its stdout trimmed).
struct SmokePhase {
  std::string name, script, expect;
};
const std::vector<SmokePhase> kSmokePhases = {
    {"write",
     "dd if=/dev/zero of=/home/dev/z bs=1M count=8 conv=fsync 2>/dev/null && wc -c < /home/dev/z",
     "8388608"},
    {"read", "sync; echo 3 > /proc/sys/vm/drop_caches; cat /home/dev/z | wc -c", "8388608"},
    {"zlib",
     "dd if=/dev/urandom of=/tmp/r bs=1M count=2 2>/dev/null && a=$(sha256sum < /tmp/r) && "
     "b=$(gzip -1 < /tmp/r | gunzip | sha256sum) && rm /tmp/r && [ \"$a\" = \"$b\" ] && echo ok",
     "ok"},
    {"node",
     "node -e \"const z=require('zlib'),c=require('crypto');let b=c.randomBytes(1<<20);const a=b;"
     "for(let i=0;i<2;i++)b=z.gunzipSync(z.gzipSync(b,{level:1}));"
     "c.createHash('sha512').update(b).digest();console.log(b.equals(a)?'ok':'corrupt')\"",
     "ok"},
};

double Median(std::vector<double> v) {
  if (v.empty()) return -1;
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::string image_dir;
  int runs = 2, memory = 1024;
  bool smoke = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--smoke") smoke = true;
    else if (a == "--markdown") continue;
    else if (a == "--runs" && i + 1 < argc) runs = std::max(1, std::atoi(argv[++i]));
    else if (!a.empty() && a[0] != '-' && image_dir.empty()) image_dir = a;
    else {
      std::cerr << "usage: tcg_cpu_bench [IMAGE_DIR] [--runs N] [--smoke] [--markdown]   (--smoke: one "
                   "round, tiny checked workloads; exits 1 when a path fails)\n";
      return 2;
    }
  }
  if (smoke) {
    runs = 1;
    memory = 512;
  }
  if (image_dir.empty()) image_dir = bench::DefaultTestImageDir();
  if (image_dir.empty()) {
    std::cerr << "tcg_cpu_bench: no image (pass IMAGE_DIR, or `cloister image build --test`)\n";
    return 1;
  }
  image_dir = fs::absolute(image_dir).string();
  std::string image = image_dir + "/disk.raw";
  if (access(image.c_str(), R_OK) != 0) {
    std::cerr << "tcg_cpu_bench: no " << image << "\n";
    return 1;
  }
  std::string found = bench::FindCloister();
  if (found.empty()) {
    auto exe = vm::CloisterExecutable();
    if (!exe.ok()) {
      std::cerr << "tcg_cpu_bench: no cloister binary beside this bench (set CLOISTER_EXE): "
                << exe.error().ToString() << "\n";
      return 1;
    }
    found = *exe;
  }
  setenv("CLOISTER_EXE", found.c_str(), 1);  // what BenchStore::Cli runs
  // A throwaway store: removed at the end, its VMs forced off, on every return below too.
  auto bs = bench::BenchStore::Make();
  if (!bs) {
    std::cerr << "tcg_cpu_bench: no temporary store under /tmp\n";
    return 1;
  }
  const std::vector<std::string> models = {"max", vm::kTcgCpuModel};
  std::map<std::string, std::map<std::string, std::vector<double>>> secs;  // model -> phase -> s
  std::vector<std::pair<std::string, std::string>> phases_run;  // name, script
  if (smoke) {
    for (const SmokePhase& p : kSmokePhases) phases_run.emplace_back(p.name, p.script);
  } else {
    phases_run = kPhases;
  }
  std::cout << "tcg_cpu_bench: " << runs << " round(s), " << memory << " MiB guests, image "
            << image << (smoke ? " (smoke: tiny workloads)" : "") << "; " << bench::LoadAverage()
            << "\n";
  int failures = 0;
  auto fatal = [](const std::string& what) {
    std::cerr << "tcg_cpu_bench: FAILED: " << what << "\n";
    return 1;
  };
  for (int r = 0; r < runs; ++r) {
    for (size_t k = 0; k < models.size(); ++k) {
      // Alternate which model goes first, so a trend in the machine's load hits both.
      const std::string& model = models[(k + static_cast<size_t>(r)) % models.size()];
      std::string name = "b" + std::to_string(r) + "-" + std::to_string(k);
      if (!bs->Create(name, image_dir, memory)) return fatal("create (-cpu " + model + ")");
      auto t0 = Clock::now();
      // The supervisor `start` spawns reads the CPU model from its environment.
      RunOutput started = bs->Cli({"start", name, "--accel", "tcg"}, {{"CLOISTER_TCG_CPU", model}});
      if (!started.success()) return fatal("start (-cpu " + model + "): " + started.err);
      secs[model]["boot"].push_back(std::chrono::duration<double>(Clock::now() - t0).count());
      std::printf("round %d, -cpu %s: boot %.1f s", r + 1, model.c_str(), secs[model]["boot"].back());
      std::fflush(stdout);
      // Untimed: the guest runs the model asked for (max has ERMS; cloister's default drops it).
      int code = -1;
      std::string cpu =
          Trim(bs->Exec(name, "grep -qw erms /proc/cpuinfo && echo erms || echo no-erms", &code));
      std::string want_cpu = model == "max" ? "erms" : "no-erms";
      if (code != 0 || cpu != want_cpu) {
        std::printf("\n");
        return fatal("-cpu " + model + ": the guest's /proc/cpuinfo says '" + cpu + "' (exit " +
                     std::to_string(code) + "), not " + want_cpu);
      }
      for (size_t ph = 0; ph < phases_run.size(); ++ph) {
        const auto& [phase, script] = phases_run[ph];
        auto p0 = Clock::now();
        int rc = -1;
        std::string out = Trim(bs->Exec(name, script, &rc));  // a failed exec is printed there
        double s = std::chrono::duration<double>(Clock::now() - p0).count();
        if (rc != 0) {
          ++failures;
          std::printf(", %s FAILED", phase.c_str());
          std::cerr << "tcg_cpu_bench: -cpu " << model << ", " << phase << " failed\n";
          continue;
        }
        if (smoke && out != kSmokePhases[ph].expect) {
          ++failures;
          std::printf(", %s WRONG", phase.c_str());
          std::cerr << "tcg_cpu_bench: -cpu " << model << ", " << phase << ": the guest printed '"
                    << out << "', not '" << kSmokePhases[ph].expect << "'\n";
          continue;
        }
        secs[model][phase].push_back(s);
        std::printf(", %s %.1f s", phase.c_str(), s);
      }
      std::printf("\n");
      std::fflush(stdout);
      bs->ForceStop(name);
      (void)bs->Cli({"rm", name, "-f"});
    }
  }
  std::printf("\nmedians (s)     %-10s %-24s ratio max/default\n", "max", vm::kTcgCpuModel);
  std::vector<std::string> phases = {"boot"};
  for (const auto& [phase, script] : phases_run) phases.push_back(phase);
  double total_a = 0, total_b = 0;
  cloister::bench::Report report(
      "tcg_cpu_bench",
      std::string("The TCG CPU model: QEMU's `max` against cloister's `") + vm::kTcgCpuModel +
          "` (without the fast-string hints), a fresh test-image workspace per model and round, "
          "the models alternating; guest workloads timed on the host through `cloister exec`, "
          "medians (ratio above 1: cloister's model is faster).",
      {"phase", "max", vm::kTcgCpuModel, "ratio max / default"});
  for (const auto& phase : phases) {
    double a = Median(secs["max"][phase]), b = Median(secs[vm::kTcgCpuModel][phase]);
    report.Row({phase, cloister::bench::Num("%.2f s", a), cloister::bench::Num("%.2f s", b),
                cloister::bench::Num("%.2f", b > 0 ? a / b : 0.0)});
    if (phase != "boot") {
      total_a += a;
      total_b += b;
    }
    std::printf("%-15s %-10.2f %-24.2f %.2f\n", phase.c_str(), a, b, b > 0 ? a / b : 0.0);
  }
  std::printf("%-15s %-10.2f %-24.2f %.2f\n", "workload", total_a, total_b,
              total_b > 0 ? total_a / total_b : 0.0);
  report.Row({"workload (sum)", cloister::bench::Num("%.2f s", total_a),
              cloister::bench::Num("%.2f s", total_b),
              cloister::bench::Num("%.2f", total_b > 0 ? total_a / total_b : 0.0)});
  if (!failures && cloister::bench::Report::Wanted(argc, argv)) {
    report.Note(cloister::bench::Num("%d round(s), %d MiB guests.", runs, memory));
    report.Print(argc, argv);
  }
  if (failures) std::cerr << "tcg_cpu_bench: " << failures << " workload(s) failed\n";
  else if (smoke) std::printf("tcg_cpu_bench: smoke OK (both models booted, workloads checked)\n");
  return failures ? 1 : 0;
}
