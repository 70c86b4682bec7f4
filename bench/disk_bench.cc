// Disk I/O of a workspace against the host, measured side by side in one run: the same script
// (sequential write with fsync and read back of a file, then 4 KiB random writes + fsync and
// random reads when python3 is there) on the guest's system disk (/root) and home (/home/dev),
// and on a host file on the same filesystem as the workspace's disk images. Before each read the
// file's cached pages are dropped with posix_fadvise(DONTNEED) (the guest's own cache; under the
// default cache=writeback the host may still cache the image). Sides: QEMU's defaults (aio=threads,
// cache=writeback), an iothread per disk, aio=io_uring, aio=io_uring and aio=native with
// cache=none (O_DIRECT). Prints MB/s and IOPS and each guest figure as a ratio of the host's.
//
// Usage: disk_bench [--image DIR] [--mib N] [--smoke]
//   DIR: disk.raw, vmlinuz, initrd.img (default: the store's debian-12, else the test image).
//   --smoke: the test image, 16 MiB, the default side only; exits 1 when any path fails.
//   --markdown: also print the section of docs/benchmarks.md (bench/report.h).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "bench/vm_bench_util.h"
#include "report.h"

using namespace cloister;

namespace {

// Prints "seq WRITE_S READ_S" and, with python3, "rand WRITE_IOPS READ_IOPS"; $1 = directory,
// $2 = MiB. Seconds from /proc/uptime (10 ms), the same clock in the guest and on the host.
std::string Script(int mib) {
  return R"SH(set -e
f="$1/cloister-disk-bench.dat"
t() { cut -d' ' -f1 /proc/uptime; }
drop() { python3 -c 'import os,sys; fd=os.open(sys.argv[1],os.O_RDONLY); os.fdatasync(fd); os.posix_fadvise(fd,0,0,os.POSIX_FADV_DONTNEED)' "$f" 2>/dev/null || { sync; echo 1 > /proc/sys/vm/drop_caches; }; }
a=$(t); dd if=/dev/zero of="$f" bs=1M count=)SH" +
         std::to_string(mib) + R"SH( conv=fsync 2>/dev/null; b=$(t)
drop
c=$(t); dd if="$f" of=/dev/null bs=1M 2>/dev/null; d=$(t)
echo "seq $(echo "$b $a" | awk '{print $1-$2}') $(echo "$d $c" | awk '{print $1-$2}')"
if command -v python3 >/dev/null 2>&1; then
python3 - "$f" <<'PY'
import os, random, sys, time
f = sys.argv[1]; n = 2000; blocks = os.path.getsize(f) // 4096
fd = os.open(f, os.O_RDWR); buf = os.urandom(4096); random.seed(1)
t = time.time()
for i in range(n): os.pwrite(fd, buf, random.randrange(blocks) * 4096)
os.fsync(fd); w = time.time() - t
os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
t = time.time()
for i in range(n): os.pread(fd, 4096, random.randrange(blocks) * 4096)
r = time.time() - t
print("rand %.0f %.0f" % (n / w, n / r))
PY
fi
rm -f "$f"
)SH";
}

struct Figures {
  double wr_mbs = -1, rd_mbs = -1, rand_w = -1, rand_r = -1;
};

bool Parse(const std::string& out, int mib, Figures* f) {
  std::istringstream in(out);
  std::string word;
  bool seq = false;
  while (in >> word) {
    if (word == "seq") {
      double w, r;
      if (!(in >> w >> r)) return false;
      f->wr_mbs = w > 0 ? mib / w : 0;
      f->rd_mbs = r > 0 ? mib / r : 0;
      seq = true;
    } else if (word == "rand") {
      in >> f->rand_w >> f->rand_r;
    }
  }
  return seq;
}

bench::Report* g_report = nullptr;  // --markdown: every row printed is a row of the table too

void Row(const std::string& what, const Figures& f, const Figures& host) {
  auto ratio = [](double a, double b) { return a > 0 && b > 0 ? a / b : 0.0; };
  if (g_report) {
    using bench::Num;
    g_report->Row({what, Num("%.1f MB/s (x%.2f)", f.wr_mbs, ratio(f.wr_mbs, host.wr_mbs)),
                   Num("%.1f MB/s (x%.2f)", f.rd_mbs, ratio(f.rd_mbs, host.rd_mbs)),
                   f.rand_w > 0 ? Num("%.0f (x%.2f)", f.rand_w, ratio(f.rand_w, host.rand_w)) : "-",
                   f.rand_w > 0 ? Num("%.0f (x%.2f)", f.rand_r, ratio(f.rand_r, host.rand_r)) : "-"});
  }
  std::printf("%-44s seq write %7.1f MB/s (x%.2f), read %7.1f MB/s (x%.2f)", what.c_str(),
              f.wr_mbs, ratio(f.wr_mbs, host.wr_mbs), f.rd_mbs, ratio(f.rd_mbs, host.rd_mbs));
  if (f.rand_w > 0) {
    std::printf("; 4k random write %6.0f IOPS (x%.2f), read %6.0f IOPS (x%.2f)", f.rand_w,
                ratio(f.rand_w, host.rand_w), f.rand_r, ratio(f.rand_r, host.rand_r));
  }
  std::printf("\n");
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  std::string image;
  int mib = 256;
  bool smoke = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--smoke") smoke = true;
    else if (a == "--markdown") continue;
    else if (a == "--image" && i + 1 < argc) image = argv[++i];
    else if (a == "--mib" && i + 1 < argc) mib = std::atoi(argv[++i]);
    else {
      std::cerr << "usage: disk_bench [--image DIR] [--mib N] [--smoke] [--markdown]\n";
      return 2;
    }
  }
  if (bench::FindCloister().empty()) {
    std::cerr << "disk_bench: no cloister binary beside this bench (set CLOISTER_EXE)\n";
    return 1;
  }
  if (smoke) {
    mib = 16;
    if (image.empty()) image = bench::DefaultTestImageDir();
  }
  if (image.empty()) image = bench::DefaultFullImageDir();
  if (image.empty()) image = bench::DefaultTestImageDir();
  if (image.empty()) {
    std::cerr << "disk_bench: no image (pass --image DIR, or `cloister image build --test`)\n";
    return 1;
  }
  auto store = bench::BenchStore::Make();
  if (!store) return 1;
  std::printf("disk_bench: image %s, %d MiB files, store %s; %s\n", image.c_str(), mib,
              store->root().c_str(), bench::LoadAverage().c_str());
  bool ok = true;
  bench::Report report(
      "disk_bench",
      "Disk I/O in a workspace against a host file on the same filesystem as its images: "
      "sequential write with fsync and read back (the guest's cache dropped first), 4 KiB random "
      "writes and reads, on the guest's system disk (/root) and home (/home/dev), for QEMU's "
      "defaults and other aio/cache/iothread sides; each figure's ratio to the host's in "
      "brackets.",
      {"side", "seq write", "seq read", "4k random write IOPS", "4k random read IOPS"});
  if (bench::Report::Wanted(argc, argv)) g_report = &report;
  // The host: the same script on the store's filesystem.
  Figures host;
  auto hr = RunProcess({"sh", "-c", Script(mib), "sh", store->root()});
  if (!hr.ok() || !hr->success() || !Parse(hr->out, mib, &host)) {
    std::cerr << "host run failed: " << (hr.ok() ? hr->err : hr.error().ToString()) << "\n";
    return 1;
  }
  Row("host file (same filesystem)", host, host);
  std::vector<std::pair<std::string, std::map<std::string, std::string>>> sides = {
      {"defaults (aio=threads, cache=writeback)", {}}};
  if (!smoke) {
    sides.push_back({"iothread per disk", {{"CLOISTER_DISK_IOTHREAD", "1"}}});
    sides.push_back({"aio=io_uring", {{"CLOISTER_DISK_AIO", "io_uring"}}});
    sides.push_back({"aio=io_uring, cache=none",
                     {{"CLOISTER_DISK_AIO", "io_uring"}, {"CLOISTER_DISK_CACHE", "none"}}});
    sides.push_back({"aio=native, cache=none",
                     {{"CLOISTER_DISK_AIO", "native"}, {"CLOISTER_DISK_CACHE", "none"}}});
  }
  int n = 0;
  for (const auto& [name, env] : sides) {
    std::string ws = "disk" + std::to_string(n++);
    if (!store->Create(ws, image, smoke ? 512 : 2048)) return 1;
    auto r = store->Cli({"start", ws, "--accel", "tcg"}, env);
    if (!r.success()) {
      std::cerr << name << ": start failed: " << r.err << "\n";
      ok = false;
      continue;
    }
    for (const char* dir : {"/root", "/home/dev"}) {
      auto g = store->Cli({"exec", ws, "-u", "root", "-i", "--", "sh", "-s", dir}, {},
                          Script(mib));
      Figures f;
      if (!g.success() || !Parse(g.out, mib, &f)) {
        std::cerr << name << " " << dir << ": " << g.err << g.out << "\n";
        ok = false;
        continue;
      }
      Row(name + ", guest " + std::string(dir), f, host);
    }
    store->ForceStop(ws);
  }
  std::printf("after: %s\n", bench::LoadAverage().c_str());
  if (!ok) std::cerr << "disk_bench: a measured path failed\n";
  if (ok && g_report) {
    report.Note(bench::Num("Image %s, %d MiB files, TCG.", image.c_str(), mib));
    report.Print(argc, argv);
  }
  return ok ? 0 : 1;
}
