// Boot overhead and idle memory of a cloister workspace, measured side by side in one run:
//   bare:     qemu-system-x86_64 (cloister's -cpu) with the image's kernel + initramfs + base
//             disk, from exec to the kernel reporting the root filesystem mounted (where the
//             image's init takes over);
//   cloister: `cloister start` of a fresh workspace on the same image, from exec to the guest
//             agent's READY (metadata disk, supervisor, QEMU, init, agent, pty+shell check, and the
//             proven-boot checkpoint);
// and reports the ratio, plus RSS and PSS of the idle workspace's QEMU process.
//
// Usage: vm_boot_bench IMAGE_DIR [--runs N] [--accel auto|kvm|tcg]
//   IMAGE_DIR holds disk.raw, vmlinuz, initrd.img (e.g. from `cloister image build --test`).
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "base/subprocess.h"
#include "store/store.h"
#include "vm/accel.h"
#include "supervisor/launcher.h"
#include "vm/process.h"
#include "vm/qemu_args.h"

using namespace cloister;
using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

namespace {

// Seconds from exec to `marker` on QEMU's serial console (stdout), or -1.
double BareBoot(const std::string& image_dir, vm::Accel accel) {
  int out[2];
  if (pipe2(out, O_CLOEXEC) != 0) return -1;
  std::vector<std::string> argv = {
      "qemu-system-x86_64", "-nodefaults", "-no-user-config", "-display", "none", "-vga", "none",
      "-no-reboot", "-machine", std::string("q35,accel=") + vm::AccelName(accel), "-cpu",
      accel == vm::Accel::kKvm ? "host" : vm::kTcgCpuModel, "-smp", "2", "-m", "2048", "-kernel",
      image_dir + "/vmlinuz", "-initrd", image_dir + "/initrd.img", "-append",
      "root=/dev/vda rw console=ttyS0 panic=-1", "-drive",
      "file=" + image_dir + "/disk.raw,format=raw,if=virtio,snapshot=on", "-serial", "stdio"};
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
    if (seen.find("EXT4-fs (vda): mounted filesystem") != std::string::npos) {
      secs = std::chrono::duration<double>(Clock::now() - start).count();
      break;
    }
    if (seen.size() > (1 << 20)) seen.erase(0, seen.size() - 4096);
  }
  kill(pid, SIGKILL);
  vm::WaitChild(pid, std::chrono::seconds(10));
  close(out[0]);
  return secs;
}

// "VmRSS:  123 kB" style field in KiB, from /proc/PID/status or smaps_rollup.
long ProcField(const std::string& file, const std::string& field) {
  std::ifstream f(file);
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind(field, 0) == 0) {
      std::istringstream in(line.substr(field.size()));
      long kb = -1;
      in >> kb;
      return kb;
    }
  }
  return -1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << "usage: vm_boot_bench IMAGE_DIR [--runs N] [--accel auto|kvm|tcg]\n";
    return 2;
  }
  std::string image_dir = fs::absolute(argv[1]).string();
  int runs = 1;
  std::string accel_text = "auto";
  for (int i = 2; i + 1 < argc; i += 2) {
    if (std::string(argv[i]) == "--runs") runs = std::max(1, std::atoi(argv[i + 1]));
    if (std::string(argv[i]) == "--accel") accel_text = argv[i + 1];
  }
  auto mode = vm::ParseAccelMode(accel_text);
  if (!mode.ok()) return 2;
  auto accel = vm::ChooseAccel(*mode);
  if (!accel.ok()) {
    std::cerr << accel.error().ToString() << "\n";
    return 1;
  }
  char tmpl[] = "/tmp/cloister-bench-XXXXXX";
  std::string root = mkdtemp(tmpl);
  auto store = Store::Open(root);
  if (!store.ok()) return 1;
  std::cout << "vm_boot_bench: accel " << vm::AccelName(accel->accel) << ", image " << image_dir
            << ", " << runs << " run(s)\n";
  double bare_total = 0, cl_total = 0;
  long rss = -1, pss = -1;
  int ok_runs = 0;
  for (int r = 0; r < runs; ++r) {
    double bare = BareBoot(image_dir, accel->accel);
    CreateRequest req;
    req.name = "bench" + std::to_string(r);
    req.image = image_dir + "/disk.raw";
    auto created = (*store)->Create(req);
    if (!created.ok()) {
      std::cerr << "create: " << created.error().ToString() << "\n";
      return 1;
    }
    std::ostringstream progress;
    vm::StartOptions so;
    so.accel = accel->accel == vm::Accel::kKvm ? vm::AccelMode::kKvm : vm::AccelMode::kTcg;
    auto start = Clock::now();
    Status st = vm::StartWorkspace(**store, req.name, so, progress);
    double cl = std::chrono::duration<double>(Clock::now() - start).count();
    if (!st.ok()) {
      std::cerr << "start: " << st.error().ToString() << "\n" << progress.str();
      return 1;
    }
    vm::VmStatus status = vm::WorkspaceStatus(**store, req.name);
    int qemu_pid = status.info.value("qemu_pid", -1);
    if (qemu_pid > 0) {
      rss = ProcField("/proc/" + std::to_string(qemu_pid) + "/status", "VmRSS:");
      pss = ProcField("/proc/" + std::to_string(qemu_pid) + "/smaps_rollup", "Pss:");
    }
    vm::StopOptions stop;
    stop.force = true;
    (void)vm::StopWorkspace(**store, req.name, stop, progress);
    (void)(*store)->Remove(req.name);
    std::printf("run %d: bare boot to root mounted %.2f s, cloister start to agent ready %.2f s, "
                "ratio %.2f; idle QEMU RSS %.0f MiB, PSS %.0f MiB\n",
                r + 1, bare, cl, bare > 0 ? cl / bare : 0.0, rss / 1024.0, pss / 1024.0);
    if (bare > 0) {
      bare_total += bare;
      cl_total += cl;
      ++ok_runs;
    }
  }
  fs::remove_all(root);
  if (ok_runs == 0) return 1;
  std::printf("mean: bare %.2f s, cloister %.2f s, overhead ratio %.2f (guest RAM 2048 MiB "
              "configured)\n", bare_total / ok_runs, cl_total / ok_runs, cl_total / bare_total);
  return 0;
}
