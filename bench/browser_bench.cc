// The browser VM's figures (issue #18), not a test: from `cloister browser ws start` to the first
// CDP answer inside the workspace (GET http://127.0.0.1:9222/json/version through the host's
// splice), the `start` command's own time (to the browser agent's READY), the browser QEMU's host
// RSS/PSS after an idle wait, and that nothing of it is left after `browser stop`.
//
// Usage: browser_bench [--image DIR] [--memory MIB] [--idle S] [--rounds N] [--smoke]
//   DIR: the browser image (disk.raw, vmlinuz, initrd.img). Default: the build tree's test image
//   with a fake `chromium` (a Node /json/version server put in place by CLOISTER_BROWSER_FILES
//   and started by the guest agent's browser role): it measures the host side and a minimal
//   guest, not Chromium's own start.
//   --smoke: 1 round, 5 s idle; exits 1 when a step fails.
//   --markdown: also print the section of docs/benchmarks.md (bench/report.h).
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "bench/vm_bench_util.h"
#include "report.h"

using namespace cloister;
using Clock = std::chrono::steady_clock;

namespace {

const char kFake[] =
    "#!/usr/bin/node\n"  // the agent execs `chromium` from PATH
    "require('http').createServer((q, s) => s.end(JSON.stringify({Browser: 'FakeChromium/1.0'})))"
    ".listen(9222, '127.0.0.1');\n";
// Polls the CDP endpoint from the workspace guest until it answers (bounded: 600 tries).
const char kPoll[] =
    "i=0; while [ $i -lt 600 ]; do "
    "node -e \"require('http').get('http://127.0.0.1:9222/json/version', r => { let d=''; "
    "r.on('data', c => d += c); r.on('end', () => process.exit(d.includes('Browser') ? 0 : 1)); })"
    ".on('error', () => process.exit(1))\" && exit 0; i=$((i+1)); sleep 0.2; done; exit 1";

}  // namespace

int main(int argc, char** argv) {
  std::string image;
  int memory = 1024, idle_s = 30, rounds = 2;
  bool smoke = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--smoke") smoke = true;
    else if (a == "--markdown") continue;
    else if (a == "--image" && i + 1 < argc) image = argv[++i];
    else if (a == "--memory" && i + 1 < argc) memory = std::atoi(argv[++i]);
    else if (a == "--idle" && i + 1 < argc) idle_s = std::atoi(argv[++i]);
    else if (a == "--rounds" && i + 1 < argc) rounds = std::atoi(argv[++i]);
    else {
      std::cerr << "usage: browser_bench [--image DIR] [--memory MIB] [--idle S] [--rounds N] "
                   "[--smoke] [--markdown]\n";
      return 2;
    }
  }
  if (smoke) {
    idle_s = 5;
    rounds = 1;
  }
  if (bench::FindCloister().empty()) {
    std::cerr << "browser_bench: the cloister binary is not built\n";
    return 1;
  }
  std::string test_image = bench::DefaultTestImageDir();
  if (test_image.empty()) {
    std::cerr << "browser_bench: the test image is not built (run a vm test once)\n";
    return 1;
  }
  bool fake = image.empty();
  if (fake) image = test_image;
  auto s = bench::BenchStore::Make();
  std::map<std::string, std::string> env;
  if (fake) {
    nlohmann::json files = nlohmann::json::array(
        {{{"path", "/usr/local/bin/chromium"}, {"content", kFake}, {"mode", 0755}, {"owner", "root"}}});
    std::string path = s->root() + "/browser-files.json";
    std::ofstream(path) << files.dump();
    env["CLOISTER_BROWSER_FILES"] = path;
  }
  std::cout << "browser_bench: image " << image << (fake ? " (test image, fake chromium)" : "")
            << ", " << memory << " MiB, load " << bench::LoadAverage() << "\n";
  if (!s->Create("ws", test_image, 384, 1)) return 1;
  auto started = s->Cli({"start", "ws", "--accel", "tcg"}, env);
  if (started.exit_code != 0) {
    std::cerr << started.err;
    return 1;
  }
  bool ok = true;
  bench::Report report(
      "browser_bench",
      "The browser VM from the workspace's side: `cloister browser ws start` to its READY, to "
      "the first CDP answer inside the workspace (through the host's splice), the browser QEMU's "
      "RSS and PSS after an idle wait, and nothing of it left after `browser stop`.",
      {"round", "start to READY", "to first CDP answer", "idle RSS", "idle PSS", "after stop"});
  for (int r = 0; r < rounds; ++r) {
    auto t0 = Clock::now();
    auto b = s->Cli({"browser", "ws", "start", "--image", image + "/disk.raw", "--memory",
                     std::to_string(memory), "--json"}, env);
    double start_s = std::chrono::duration<double>(Clock::now() - t0).count();
    if (b.exit_code != 0) {
      std::cerr << b.err;
      ok = false;
      break;
    }
    int code = -1;
    s->Exec("ws", kPoll, &code, "dev");
    double cdp_s = std::chrono::duration<double>(Clock::now() - t0).count();
    if (code != 0) ok = false;
    pid_t pid = nlohmann::json::parse(b.out, nullptr, false)["browser"].value("qemu_pid", 0);
    if (pid <= 0) {
      std::cerr << "browser_bench: no QEMU pid in " << b.out << "\n";
      ok = false;
      break;
    }
    // Idle, then the host's view of the browser QEMU (not a timing assertion: a figure).
    std::this_thread::sleep_for(std::chrono::seconds(idle_s));
    long rss = bench::ProcKib(pid, "status", "VmRSS:"), pss = bench::ProcKib(pid, "smaps_rollup", "Pss:");
    auto stop = s->Cli({"browser", "ws", "stop"}, env);
    bool gone = access(("/proc/" + std::to_string(pid)).c_str(), F_OK) != 0;
    if (stop.exit_code != 0 || !gone) ok = false;
    std::printf("round %d: browser start (to READY) %.1f s, to first CDP answer %.1f s; idle %d s: "
                "QEMU RSS %ld MiB, PSS %ld MiB; after stop: QEMU %s\n",
                r + 1, start_s, cdp_s, idle_s, rss / 1024, pss / 1024, gone ? "gone (RSS 0)" : "STILL THERE");
    report.Row({std::to_string(r + 1), bench::Num("%.1f s", start_s), bench::Num("%.1f s", cdp_s),
                bench::Num("%ld MiB", rss / 1024), bench::Num("%ld MiB", pss / 1024),
                gone ? "gone" : "STILL THERE"});
  }
  if (ok && bench::Report::Wanted(argc, argv)) {
    report.Note(bench::Num("Image %s%s, %d MiB, idle %d s, TCG.", image.c_str(),
                           fake ? " (the test image with a fake chromium: the host side, not "
                                  "Chromium's start)" : "",
                           memory, idle_s));
    report.Print(argc, argv);
  }
  std::cout << "load after: " << bench::LoadAverage() << "\n";
  s->ForceStop("ws");
  return ok ? 0 : 1;
}
