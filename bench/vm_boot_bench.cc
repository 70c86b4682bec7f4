// Boot overhead of a cloister workspace, like for like, measured side by side in one run:
//   bare:     qemu-system-x86_64 with what cloister gives QEMU for the boot itself (q35, the same
//             -accel/tb-size and -cpu, vCPUs, RAM, the image's kernel, initramfs and kernel
//             command line, the image's disk as virtio-blk, the balloon), from exec to the boot
//             hook starting, seen on the serial console ("cloister-boot-hook: started", or
//             systemd's "Started cloister-boot.service" line on images without it);
//   cloister: `cloister start --timings` of a fresh workspace on the same image, from exec to the
//             guest agent's READY (supervisor, disks, proxy, metadata disk, QEMU, firmware, kernel,
//             init, agent setup, terminal probe, proven-boot checkpoint), with each phase; then
//             the first `cloister exec NAME -- true` after it (READY does not wait for the tmux
//             session; an exec waits for it in the guest), timed apart;
// for the test image and the default image (whichever are there), and the ratio cloister / bare
// (the goal: at most 1.15). Also QEMU's idle RSS right after READY, and (where the console
// stamps the hook's line with the kernel's clock: systemd images) the guest's clock at the hook
// on both sides, which says whether the boots differ before the hook or only after it (with its
// mean over the runs), and cloister's READY on the same clock (the guest's phases summed): its
// part after the hook, which the host's noise moves least. Per image: the mean ratio (total over
// total) and the median of the runs' ratios, which one boot slowed by a shared machine does not
// move. The runs alternate between the images (run 1 of each, then run 2 of each, ...), so
// `--image A --image B` compares two builds of an image under the same drift of the machine. Each
// side runs with both kernel entries (vm/pvh_kernel.h): PVH with the derived vmlinux (cloister's
// default) and the bzImage through SeaBIOS (`CLOISTER_KERNEL_BOOT=bzimage`), unless
// --kernel-boot picks one.
//
// Usage: vm_boot_bench [--image DIR]... [--runs N] [--memory MIB] [--kernel-boot pvh|bzimage]
//                      [--smoke]
//   DIR holds disk.raw, vmlinuz, initrd.img. Default: the build tree's test image and the store's
//   debian-12. --smoke: the test image only, one run; exits 1 when any path fails.
//   --markdown: also print the section of docs/benchmarks.md (bench/report.h).
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "base/file_util.h"
#include "bench/vm_bench_util.h"
#include "vm/pvh_kernel.h"
#include "image/boot_hook.h"
#include "protocol/contract.h"
#include "vm/process.h"
#include "vm/qemu_args.h"
#include "report.h"

using namespace cloister;
using Clock = std::chrono::steady_clock;

namespace {

// The guest's clock (the kernel's "[   12.345678]" prefix) on the console line where the boot
// hook says it started, or -1. Both sides log it, so the two boots compare up to the same point
// on the guest's own clock, without the host's QEMU start.
double GuestClockAtHook(const std::string& console) {
  size_t at = console.find(image::kBootHookStartedLine);
  if (at == std::string::npos) return -1;
  size_t line = console.rfind('\n', at);
  line = line == std::string::npos ? 0 : line + 1;
  if (line >= console.size() || console[line] != '[') return -1;
  return std::atof(console.c_str() + line + 1);
}

double Mean(const std::vector<double>& v) {
  double sum = 0;
  for (double x : v) sum += x;
  return v.empty() ? 0 : sum / v.size();
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// Seconds from exec to the boot hook starting on the serial console, or -1; the guest's clock at
// that line into *guest_clock.
double BareBoot(const std::string& image_dir, const std::string& kernel, int memory, int cpus,
                double* guest_clock) {
  int out[2];
  if (pipe2(out, O_CLOEXEC) != 0) return -1;
  vm::VmSpec spec;  // cloister's defaults: CPU model, tb-size, command line
  std::vector<std::string> argv = {
      "qemu-system-x86_64", "-nodefaults", "-no-user-config", "-display", "none", "-vga", "none",
      "-no-reboot", "-machine", "q35", "-accel",
      "tcg,tb-size=" + std::to_string(spec.tcg_tb_size_mib), "-cpu", spec.tcg_cpu, "-smp",
      std::to_string(cpus), "-m", std::to_string(memory), "-kernel", kernel,
      "-initrd", image_dir + "/initrd.img", "-append", vm::KernelCmdline(spec), "-drive",
      "file=" + image_dir + "/disk.raw,format=raw,if=virtio,snapshot=on", "-device",
      "virtio-balloon-pci,free-page-reporting=on", "-serial", "stdio"};
  auto start = Clock::now();
  pid_t pid = fork();
  if (pid == 0) {
    dup2(out[1], 1);
    int null = open("/dev/null", O_RDWR);
    dup2(null, 0);
    dup2(null, 2);
    std::vector<char*> c;
    for (auto& a : argv) c.push_back(a.data());
    c.push_back(nullptr);
    execvp(c[0], c.data());
    _exit(127);
  }
  close(out[1]);
  std::string seen;
  double secs = -1;
  auto deadline = start + std::chrono::minutes(5);
  while (Clock::now() < deadline) {
    pollfd p{out[0], POLLIN, 0};
    if (poll(&p, 1, 1000) <= 0) continue;
    char buf[4096];
    ssize_t n = read(out[0], buf, sizeof(buf));
    if (n <= 0) break;
    seen.append(buf, static_cast<size_t>(n));
    if (seen.find(image::kBootHookStartedLine) != std::string::npos ||
        seen.find("Started cloister-boot.service") != std::string::npos ||
        seen.find("Started \x1b[0;1;39mcloister-boot.service") != std::string::npos) {
      secs = std::chrono::duration<double>(Clock::now() - start).count();
      // The rest of the hook's line, for its clock prefix (an image without the line has none).
      const size_t hook = seen.find(image::kBootHookStartedLine);
      for (int i = 0; hook != std::string::npos && i < 20 &&
                      seen.find('\n', hook) == std::string::npos;
           ++i) {
        pollfd q{out[0], POLLIN, 0};
        if (poll(&q, 1, 50) <= 0) break;
        ssize_t m = read(out[0], buf, sizeof(buf));
        if (m <= 0) break;
        seen.append(buf, static_cast<size_t>(m));
      }
      *guest_clock = GuestClockAtHook(seen);
      break;
    }
    if (seen.size() > (1 << 20)) seen.erase(0, seen.size() - 4096);
  }
  kill(pid, SIGKILL);
  vm::WaitChild(pid, std::chrono::seconds(10));
  close(out[0]);
  return secs;
}

// "PHASE MS" rows of `start --timings`.
std::vector<std::pair<std::string, long>> TimingRows(const std::string& out) {
  std::vector<std::pair<std::string, long>> rows;
  std::istringstream in(out);
  std::string name;
  long ms;
  std::string line;
  std::getline(in, line);  // header
  while (std::getline(in, line)) {
    std::istringstream l(line);
    if (l >> name >> ms) rows.emplace_back(name, ms);
  }
  return rows;
}

// The guest's clock at READY in seconds, or -1: the sum of the guest's phases in those rows (each
// is the span between two of the agent's marks, the first from the kernel's start; see
// supervisor/boot_timings.h GuestPhases).
double GuestClockAtReady(const std::vector<std::pair<std::string, long>>& rows) {
  long ms = 0;
  int found = 0;
  for (const auto& [name, v] : rows) {
    if (name == "kernel" || name == "init-to-hook" || name == "agent-setup" ||
        name == "terminal-probe" || name == "to-ready") {
      ms += v;
      ++found;
    }
  }
  return found == 5 ? ms / 1000.0 : -1;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> images;
  int runs = 1, memory = 2048, cpus = 2;
  bool smoke = false;
  std::vector<std::string> entries = {"pvh", "bzimage"};
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--smoke") smoke = true;
    else if (a == "--markdown") continue;
    else if (a == "--image" && i + 1 < argc) images.push_back(argv[++i]);
    else if (a == "--runs" && i + 1 < argc) runs = std::max(1, std::atoi(argv[++i]));
    else if (a == "--memory" && i + 1 < argc) memory = std::atoi(argv[++i]);
    else if (a == "--kernel-boot" && i + 1 < argc &&
             (std::string(argv[i + 1]) == "pvh" || std::string(argv[i + 1]) == "bzimage")) {
      entries = {argv[++i]};
    } else {
      std::cerr << "usage: vm_boot_bench [--image DIR]... [--runs N] [--memory MIB] "
                   "[--kernel-boot pvh|bzimage] [--smoke] [--markdown]\n";
      return 2;
    }
  }
  if (bench::FindCloister().empty()) {
    std::cerr << "vm_boot_bench: no cloister binary beside this bench (set CLOISTER_EXE)\n";
    return 1;
  }
  if (images.empty()) {
    if (std::string t = bench::DefaultTestImageDir(); !t.empty()) images.push_back(t);
    if (std::string f = bench::DefaultFullImageDir(); !f.empty() && !smoke) images.push_back(f);
  }
  if (smoke) {
    runs = 1;
    memory = 512;
  }
  if (images.empty()) {
    std::cerr << "vm_boot_bench: no image (pass --image DIR, or `cloister image build --test`)\n";
    return 1;
  }
  std::printf("vm_boot_bench: TCG, %d vCPUs, %d MiB, %d run(s); %s\n", cpus, memory, runs,
              bench::LoadAverage().c_str());
  auto store = bench::BenchStore::Make();
  if (!store) return 1;
  bool ok = true;
  int n = 0;
  // One side per image and kernel entry. The runs alternate between them (run 1 of each, then
  // run 2 of each, ...), so two images compared in one bench see the same drift of the machine.
  struct Side {
    std::string image, entry, kernel;
    double bare_total = 0, cl_total = 0, exec_total = 0;
    int ok_runs = 0;
    std::vector<double> ratios, hook_gaps, hook_to_ready;
  };
  std::vector<Side> sides;
  for (const std::string& image : images) {
    for (const std::string& entry : entries) {
      // Both sides boot the same kernel file: the bzImage, or the vmlinux cloister derives (into
      // the bench store's cache, which its workspaces then reuse: neither side pays the decode).
      std::string kernel = image + "/vmlinuz";
      if (entry == "pvh") {
        auto pvh = vm::EnsurePvhKernel(kernel, store->root() + "/cache/pvh");
        if (!pvh.ok()) {
          std::cerr << image << ": no PVH kernel: " << pvh.error().ToString() << "\n";
          ok = false;
          continue;
        }
        kernel = *pvh;
      }
      Side side;
      side.image = image;
      side.entry = entry;
      side.kernel = kernel;
      sides.push_back(std::move(side));
    }
  }
  for (int r = 0; r < runs; ++r) {
    for (Side& side : sides) {
      const std::string& image = side.image;
      const std::string& entry = side.entry;
      double bare_hook = -1;
      double bare = BareBoot(image, side.kernel, memory, cpus, &bare_hook);
      std::string ws = "boot" + std::to_string(n++);
      if (!store->Create(ws, image, memory, cpus)) return 1;
      auto t0 = Clock::now();
      auto started = store->Cli({"start", ws, "--accel", "tcg", "--timings"},
                                {{"CLOISTER_KERNEL_BOOT", entry}});
      double cl = std::chrono::duration<double>(Clock::now() - t0).count();
      if (!started.success() || bare <= 0) {
        std::cerr << image << ": " << (bare <= 0 ? "bare boot never reached the hook; " : "")
                  << started.err << "\n";
        ok = false;
        store->ForceStop(ws);
        continue;
      }
      pid_t qemu = store->QemuPid(ws);
      long rss = qemu > 0 ? bench::ProcKib(qemu, "status", "VmRSS:") / 1024 : -1;
      // The first command after READY: READY does not wait for the tmux session, exec does
      // (guest/agent.cc), so a boot's whole cost to `start && exec` is READY plus this.
      auto e0 = Clock::now();
      auto exec = store->Cli({"exec", ws, "--", "true"});
      double first_exec = std::chrono::duration<double>(Clock::now() - e0).count();
      store->ForceStop(ws);
      if (!exec.success()) {
        std::cerr << image << ": the first exec after READY failed: " << exec.err << "\n";
        ok = false;
        continue;
      }
      auto console = ReadFileBounded(store->store().Paths(ws).console_log, 16 << 20);
      double cl_hook = console.ok() ? GuestClockAtHook(*console) : -1;
      const auto phases = TimingRows(started.out);
      double cl_ready = GuestClockAtReady(phases);
      std::printf("%s [%s] run %d: bare exec to boot hook %.2f s, cloister start to READY %.2f s, "
                  "ratio %.2f; first exec after READY %.2f s; QEMU RSS at READY %ld MiB\n"
                  "  phases (ms):",
                  image.c_str(), entry.c_str(), r + 1, bare, cl, cl / bare, first_exec, rss);
      for (const auto& [name, ms] : phases) std::printf(" %s %ld", name.c_str(), ms);
      std::printf("\n");
      // Where the two boots part: equal clocks here put all of the difference after the hook.
      if (bare_hook >= 0 && cl_hook >= 0) {
        std::printf("  guest clock at the boot hook's start: bare %.2f s, cloister %.2f s",
                    bare_hook, cl_hook);
        // Cloister's part after the hook on the guest's own clock: what the host's noise moves
        // least, and what a change to the hook, the agent or the guest's units shows in.
        if (cl_ready >= cl_hook) {
          std::printf("; cloister's READY %.2f s (%.0f ms after its hook)", cl_ready,
                      (cl_ready - cl_hook) * 1000);
          side.hook_to_ready.push_back(cl_ready - cl_hook);
        }
        std::printf("\n");
      }
      std::fflush(stdout);
      side.ratios.push_back(cl / bare);
      if (bare_hook >= 0 && cl_hook >= 0) side.hook_gaps.push_back(cl_hook - bare_hook);
      side.bare_total += bare;
      side.cl_total += cl;
      side.exec_total += first_exec;
      ++side.ok_runs;
    }
  }
  cloister::bench::Report report(
      "vm_boot_bench",
      "Boot overhead, like for like: a bare QEMU with what cloister gives QEMU for the boot "
      "itself, from exec to the boot hook starting, against `cloister start` of a fresh "
      "workspace on the same image to the guest agent's READY (goal: ratio at most 1.15), with "
      "the first `exec` after READY; per image and kernel entry, runs alternating between images.",
      {"image", "kernel entry", "bare to the hook", "cloister to READY", "ratio (median)",
       "first exec", "hook to READY, guest clock"});
  for (Side& side : sides) {
    if (side.ok_runs == 0) continue;
    report.Row({side.image, side.entry,
                cloister::bench::Num("%.2f s", side.bare_total / side.ok_runs),
                cloister::bench::Num("%.2f s", side.cl_total / side.ok_runs),
                cloister::bench::Num("%.2f (%.2f)", side.cl_total / side.bare_total,
                                     Median(side.ratios)),
                cloister::bench::Num("%.2f s", side.exec_total / side.ok_runs),
                side.hook_to_ready.empty()
                    ? "-"
                    : cloister::bench::Num("%.0f ms", Median(side.hook_to_ready) * 1000)});
    const char* image = side.image.c_str();
    const char* entry = side.entry.c_str();
    // The median of the runs' ratios too: one boot slowed by the machine moves the mean.
    std::printf("%s [%s] mean: bare %.2f s, cloister %.2f s, ratio %.2f (median of the runs "
                "%.2f; goal 1.15); first exec after READY %.2f s\n",
                image, entry, side.bare_total / side.ok_runs, side.cl_total / side.ok_runs,
                side.cl_total / side.bare_total, Median(side.ratios),
                side.exec_total / side.ok_runs);
    // How much of cloister's extra time is before the hook (its devices, in the guest's own
    // clock) and so not the agent's.
    if (!side.hook_gaps.empty()) {
      std::printf("%s [%s] guest clock at the hook, cloister minus bare: mean %+.2f s over %zu "
                  "run(s)\n",
                  image, entry, Mean(side.hook_gaps), side.hook_gaps.size());
    }
    if (!side.hook_to_ready.empty()) {
      std::printf("%s [%s] cloister's hook to READY on the guest clock: mean %.0f ms, median "
                  "%.0f ms over %zu run(s)\n",
                  image, entry, Mean(side.hook_to_ready) * 1000,
                  Median(side.hook_to_ready) * 1000, side.hook_to_ready.size());
    }
  }
  std::printf("after: %s\n", bench::LoadAverage().c_str());
  if (!ok) std::cerr << "vm_boot_bench: a measured path failed\n";
  if (ok && cloister::bench::Report::Wanted(argc, argv)) {
    report.Note(cloister::bench::Num("TCG, %d vCPUs, %d MiB, %d run(s) per side; times are means "
                                     "over the runs.", cpus, memory, runs));
    report.Print(argc, argv);
  }
  return ok ? 0 : 1;
}
