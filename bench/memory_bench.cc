// Idle memory of a workspace given back to the host, measured side by side in one run:
//   reporting on:  the default (virtio-balloon with free page reporting, TCG tb-size 256 MiB);
//   reporting off: CLOISTER_FREE_PAGE_REPORTING=0 (no balloon), same tb-size;
//   tb-size 0 (QEMU's 1 GiB default) and 64 MiB, reporting on.
// Each side boots a fresh workspace, runs the same guest workload (a shell CPU loop, then RAM
// filled and freed through tmpfs, then a file written, read back and deleted: page cache filled
// and freed), times it from the host, waits idle, then reads QEMU's RSS and the guest's own
// `free -m` (used, buff/cache). It prints, per side, the workload time, the idle RSS, and the
// excess RSS - (used + cache) (the goal: at most 150 MiB within 60 s), the same for the
// anonymous part of the RSS alone (RssAnon: the file-backed rest is page cache), and the ratios
// of each side to the default.
//
// Usage: memory_bench [--image DIR] [--memory MIB] [--idle S] [--smoke]
//   DIR: disk.raw, vmlinuz, initrd.img (default: the store's debian-12, else the test image).
//   --smoke: the test image, 512 MiB guests, a small workload, 5 s idle, two sides; exits 1 when
//   any boot, exec or measurement fails.
//   --markdown: also print the section of docs/benchmarks.md (bench/report.h).
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "bench/vm_bench_util.h"
#include "report.h"

using namespace cloister;
using Clock = std::chrono::steady_clock;

namespace {

struct Side {
  std::string name;
  std::map<std::string, std::string> env;
  double cpu_s = -1, mem_s = -1;
  long rss_mib = -1, used = -1, cache = -1, rss_busy_mib = -1;
  // The idle RSS split: anonymous (guest RAM, TCG's translation cache, QEMU's heap: memory only
  // this workspace holds) and file-backed (QEMU's mappings of the kernel and initrd it loaded,
  // its own binary and libraries: page cache, shared by workspaces of one image, and reclaimable).
  long anon_mib = -1, file_mib = -1;
};

double Timed(bench::BenchStore& s, const std::string& ws, const std::string& script, bool* ok) {
  auto t0 = Clock::now();
  int code = -1;
  s.Exec(ws, script, &code);
  if (code != 0) *ok = false;
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  std::string image;
  int memory = 2048, idle_s = 60;
  bool smoke = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--smoke") smoke = true;
    else if (a == "--markdown") continue;
    else if (a == "--image" && i + 1 < argc) image = argv[++i];
    else if (a == "--memory" && i + 1 < argc) memory = std::atoi(argv[++i]);
    else if (a == "--idle" && i + 1 < argc) idle_s = std::atoi(argv[++i]);
    else {
      std::cerr << "usage: memory_bench [--image DIR] [--memory MIB] [--idle S] [--smoke] [--markdown]\n";
      return 2;
    }
  }
  if (bench::FindCloister().empty()) {
    std::cerr << "memory_bench: no cloister binary beside this bench (set CLOISTER_EXE)\n";
    return 1;
  }
  if (smoke) {
    memory = 512;
    idle_s = 5;
    if (image.empty()) image = bench::DefaultTestImageDir();
  }
  if (image.empty()) image = bench::DefaultFullImageDir();
  if (image.empty()) image = bench::DefaultTestImageDir();
  if (image.empty()) {
    std::cerr << "memory_bench: no image (pass --image DIR, or build the test image: "
                 "`cloister image build --test`)\n";
    return 1;
  }
  // The workload: MiB of RAM filled and freed, MiB of page cache filled and freed, loop count.
  // (tmpfs holds at most half the guest RAM by default.)
  const int ram = smoke ? 64 : memory * 3 / 8, file = smoke ? 32 : memory / 4;
  const int loop = smoke ? 20000 : 300000;
  std::vector<Side> sides = {{"reporting on, tb 256", {}},
                             {"reporting off, tb 256", {{"CLOISTER_FREE_PAGE_REPORTING", "0"}}}};
  if (!smoke) {
    sides.push_back({"reporting on, tb 1024 (QEMU default)", {{"CLOISTER_TCG_TB_SIZE", "0"}}});
    sides.push_back({"reporting on, tb 64", {{"CLOISTER_TCG_TB_SIZE", "64"}}});
  }
  std::printf("memory_bench: image %s, guest %d MiB, workload loop %d, RAM %d MiB, file %d MiB, "
              "idle %d s; %s\n", image.c_str(), memory, loop, ram, file, idle_s,
              bench::LoadAverage().c_str());
  auto store = bench::BenchStore::Make();
  if (!store) return 1;
  bench::Report report(
      "memory_bench",
      "Idle memory a workspace gives back: each side boots a fresh workspace, runs the same "
      "workload (a shell loop, RAM filled and freed through tmpfs, page cache filled and freed), "
      "waits idle, then reads QEMU's RSS (and its anonymous part) against the guest's own used + "
      "cache; the goal is an excess of at most 150 MiB.",
      {"side", "loop", "fill+free", "idle RSS (anonymous)", "guest used + cache",
       "excess (anonymous)"});
  bool ok = true;
  int n = 0;
  for (Side& side : sides) {
    std::string ws = "mem" + std::to_string(n++);
    if (!store->Create(ws, image, memory)) return 1;
    auto r = store->Cli({"start", ws, "--accel", "tcg"}, side.env);
    if (!r.success()) {
      std::cerr << side.name << ": start failed: " << r.err << "\n";
      ok = false;
      continue;
    }
    side.cpu_s = Timed(*store, ws,
                       "i=0; while [ $i -lt " + std::to_string(loop) + " ]; do i=$((i+1)); done",
                       &ok);
    side.mem_s = Timed(*store, ws,
                       "dd if=/dev/zero of=/dev/shm/fill bs=1M count=" + std::to_string(ram) +
                           " 2>/dev/null && rm /dev/shm/fill && dd if=/dev/zero of=/root/f bs=1M "
                           "count=" + std::to_string(file) +
                           " 2>/dev/null && sync && cat /root/f >/dev/null && rm /root/f",
                       &ok);
    pid_t qemu = store->QemuPid(ws);
    side.rss_busy_mib = qemu > 0 ? bench::ProcKib(qemu, "status", "VmRSS:") / 1024 : -1;
    std::this_thread::sleep_for(std::chrono::seconds(idle_s));
    int code = -1;
    std::string free_out = store->Exec(ws, "free -m", &code);
    if (code != 0 || !bench::ParseFree(free_out, &side.used, &side.cache)) ok = false;
    side.rss_mib = qemu > 0 ? bench::ProcKib(qemu, "status", "VmRSS:") / 1024 : -1;
    side.anon_mib = qemu > 0 ? bench::ProcKib(qemu, "status", "RssAnon:") / 1024 : -1;
    side.file_mib = qemu > 0 ? bench::ProcKib(qemu, "status", "RssFile:") / 1024 : -1;
    if (side.rss_mib < 0 || side.anon_mib < 0 || side.file_mib < 0) ok = false;
    store->ForceStop(ws);
    std::printf("%-40s loop %6.2f s, fill+free %6.2f s; RSS after work %5ld MiB, idle %ld s later "
                "%5ld MiB (anonymous %ld, file-backed %ld); guest used %ld + cache %ld MiB; "
                "excess %ld MiB, anonymous excess %ld MiB\n",
                side.name.c_str(), side.cpu_s, side.mem_s, side.rss_busy_mib, static_cast<long>(idle_s),
                side.rss_mib, side.anon_mib, side.file_mib, side.used, side.cache,
                side.rss_mib - side.used - side.cache, side.anon_mib - side.used - side.cache);
    std::fflush(stdout);
    report.Row({side.name, bench::Num("%.2f s", side.cpu_s), bench::Num("%.2f s", side.mem_s),
                bench::Num("%ld MiB (%ld)", side.rss_mib, side.anon_mib),
                bench::Num("%ld + %ld MiB", side.used, side.cache),
                bench::Num("%ld MiB (%ld)", side.rss_mib - side.used - side.cache,
                           side.anon_mib - side.used - side.cache)});
  }
  const Side& base = sides[0];
  for (size_t i = 1; i < sides.size(); ++i) {
    const Side& s = sides[i];
    if (s.cpu_s <= 0 || base.cpu_s <= 0) continue;
    // Ratios of the default side to this one: time < 1 means the default is faster, RSS < 1
    // that it holds less.
    std::printf("[%s] / [%s]: loop time x%.2f, fill+free time x%.2f, idle RSS x%.2f\n",
                base.name.c_str(), s.name.c_str(), base.cpu_s / s.cpu_s, base.mem_s / s.mem_s,
                s.rss_mib > 0 ? static_cast<double>(base.rss_mib) / s.rss_mib : 0.0);
  }
  std::printf("after: %s\n", bench::LoadAverage().c_str());
  if (!ok) std::cerr << "memory_bench: a measured path failed\n";
  if (ok && bench::Report::Wanted(argc, argv)) {
    report.Note(bench::Num("Image %s, guest %d MiB, TCG, idle %d s; workload loop %d, RAM %d "
                           "MiB, file %d MiB.", image.c_str(), memory, idle_s, loop, ram, file));
    report.Print(argc, argv);
  }
  return ok ? 0 : 1;
}
