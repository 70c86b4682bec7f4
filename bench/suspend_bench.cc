// Suspend and resume, measured side by side in one run: guests of 2 and 8 GiB, each idle after
// its boot and again after a workload that filled and freed RAM and page cache (with free page
// reporting the freed pages are discarded, so the state file should not carry them). Per case:
// `cloister stop --suspend` time, the state file's size against the guest's own used + cache
// (`free -m` just before; the goal is at most 1.1x), and `cloister start` (resume) plus a first
// `exec true` (the goal is under 1 s under TCG).
//
// Usage: suspend_bench [--image DIR] [--sizes 2048,8192] [--smoke] [--markdown]
//   --markdown: also print the section of docs/benchmarks.md (bench/report.h).
//   DIR: disk.raw, vmlinuz, initrd.img (default: the store's debian-12, else the test image).
//   --smoke: the test image, one 512 MiB guest, a small workload; exits 1 when any path fails.
#include <sys/stat.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bench/vm_bench_util.h"
#include "report.h"

using namespace cloister;
using Clock = std::chrono::steady_clock;

namespace {

double Since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

bench::Report* g_report = nullptr;  // --markdown: every row printed is a row of the table too

// One suspend + resume of a running workspace; prints a row, false when a path failed.
bool Cycle(bench::BenchStore& s, const std::string& ws, int memory, const std::string& what) {
  int code = -1;
  long used = -1, cache = -1;
  std::string free_out = s.Exec(ws, "sync; free -m", &code);
  if (code != 0 || !bench::ParseFree(free_out, &used, &cache)) return false;
  auto t0 = Clock::now();
  auto r = s.Cli({"stop", ws, "--suspend"});
  double suspend_s = Since(t0);
  if (!r.success()) {
    std::cerr << "suspend " << ws << ": " << r.err << "\n";
    return false;
  }
  struct stat st;
  std::string state = s.store().Paths(ws).suspend_state;
  double state_mib = stat(state.c_str(), &st) == 0 ? st.st_size / 1048576.0 : -1;
  t0 = Clock::now();
  r = s.Cli({"start", ws});
  double start_s = Since(t0);
  if (!r.success()) {
    std::cerr << "resume " << ws << ": " << r.err << "\n";
    return false;
  }
  s.Exec(ws, "true", &code);
  double resume_s = Since(t0);
  std::printf("%5d MiB guest, %-28s used %5ld + cache %5ld MiB; suspend %6.2f s; state %7.1f MiB "
              "(x%.2f of used+cache); resume %5.2f s, to a working exec %5.2f s\n",
              memory, what.c_str(), used, cache, suspend_s, state_mib,
              used + cache > 0 ? state_mib / static_cast<double>(used + cache) : 0.0, start_s,
              resume_s);
  std::fflush(stdout);
  if (g_report) {
    using bench::Num;
    g_report->Row({Num("%d MiB, %s", memory, what.c_str()), Num("%ld + %ld MiB", used, cache),
                   Num("%.2f s", suspend_s),
                   Num("%.1f MiB (x%.2f)", state_mib,
                       used + cache > 0 ? state_mib / static_cast<double>(used + cache) : 0.0),
                   Num("%.2f s", start_s), Num("%.2f s", resume_s)});
  }
  return code == 0 && state_mib > 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string image, sizes_text = "2048,8192";
  bool smoke = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--smoke") smoke = true;
    else if (a == "--markdown") continue;
    else if (a == "--image" && i + 1 < argc) image = argv[++i];
    else if (a == "--sizes" && i + 1 < argc) sizes_text = argv[++i];
    else {
      std::cerr << "usage: suspend_bench [--image DIR] [--sizes 2048,8192] [--smoke] [--markdown]\n";
      return 2;
    }
  }
  if (bench::FindCloister().empty()) {
    std::cerr << "suspend_bench: no cloister binary beside this bench (set CLOISTER_EXE)\n";
    return 1;
  }
  if (smoke) {
    sizes_text = "512";
    if (image.empty()) image = bench::DefaultTestImageDir();
  }
  if (image.empty()) image = bench::DefaultFullImageDir();
  if (image.empty()) image = bench::DefaultTestImageDir();
  if (image.empty()) {
    std::cerr << "suspend_bench: no image (pass --image DIR, or `cloister image build --test`)\n";
    return 1;
  }
  std::vector<int> sizes;
  std::istringstream in(sizes_text);
  for (std::string t; std::getline(in, t, ',');) sizes.push_back(std::atoi(t.c_str()));
  std::printf("suspend_bench: image %s; %s\n", image.c_str(), bench::LoadAverage().c_str());
  auto store = bench::BenchStore::Make();
  if (!store) return 1;
  bench::Report report(
      "suspend_bench",
      "Suspend and resume of a workspace idle after its boot and again after a workload that "
      "filled and freed RAM and page cache: `stop --suspend` time, the state file against the "
      "guest's used + cache (goal: at most 1.1x), `start` (resume) and a first working `exec` "
      "(goal: under 1 s).",
      {"guest", "used + cache", "suspend", "state", "resume", "to a working exec"});
  if (bench::Report::Wanted(argc, argv)) g_report = &report;
  bool ok = true;
  for (int memory : sizes) {
    std::string ws = "sus" + std::to_string(memory);
    if (!store->Create(ws, image, memory)) return 1;
    auto r = store->Cli({"start", ws, "--accel", "tcg"});
    if (!r.success()) {
      std::cerr << "start " << ws << ": " << r.err << "\n";
      ok = false;
      continue;
    }
    ok &= Cycle(*store, ws, memory, "idle after boot");
    // Fill and free: RAM through tmpfs, then page cache of a file written, read and deleted.
    int ram = smoke ? 64 : memory * 3 / 8, file = smoke ? 32 : memory / 4;  // tmpfs: at most 1/2
    int code = -1;
    store->Exec(ws,
                "dd if=/dev/zero of=/dev/shm/fill bs=1M count=" + std::to_string(ram) +
                    " 2>/dev/null && rm /dev/shm/fill && dd if=/dev/zero of=/root/f bs=1M count=" +
                    std::to_string(file) + " 2>/dev/null && sync && cat /root/f >/dev/null && rm /root/f",
                &code);
    ok &= code == 0;
    // Free page reporting works in 2 MiB runs after a short delay: give it a few seconds.
    std::this_thread::sleep_for(std::chrono::seconds(smoke ? 2 : 10));
    ok &= Cycle(*store, ws, memory, "after fill+free workload");
    store->ForceStop(ws);
  }
  std::printf("after: %s\n", bench::LoadAverage().c_str());
  if (!ok) std::cerr << "suspend_bench: a measured path failed\n";
  if (ok && g_report) {
    report.Note(bench::Num("Image %s, TCG.", image.c_str()));
    report.Print(argc, argv);
  }
  return ok ? 0 : 1;
}
