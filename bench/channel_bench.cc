// Channel throughput: bytes through one Mux stream (host mux <-> guest mux over a socketpair, as
// over the virtio-serial port) against the same bytes over a bare socketpair, in one run.
// Also 8 concurrent streams. Prints MiB/s and the ratio (mux / raw). Every path checks that the
// far end read exactly the bytes written (a short write or read fails the run).
//
// Usage: channel_bench [--smoke] [--markdown]
//   --markdown: also print the section of docs/benchmarks.md (bench/report.h).
//   Default: 256 MiB per path. --smoke: 8 MiB per path, and each stream carries its own byte
//   pattern that the reader checks (bytes lost, duplicated or crossed between streams); exits 1
//   with the reason on stderr when any path fails (scripts/bench-smoke.sh).
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "channel/mux.h"
#include "report.h"

using namespace cloister::channel;
using Clock = std::chrono::steady_clock;

namespace {

size_t g_total = 256ull << 20;
bool g_verify = false;  // --smoke: per-stream patterns, checked by the readers

// Writes g_total/n bytes into each fd and reads them back at the far ends; returns seconds, or -1
// (printed) when a far end did not read exactly what was written.
double Pump(const std::string& what, const std::vector<std::pair<int, int>>& pairs) {
  auto start = Clock::now();
  std::vector<std::thread> threads;
  size_t per = g_total / pairs.size();
  std::vector<size_t> sent(pairs.size(), 0), got(pairs.size(), 0);
  std::vector<char> corrupt(pairs.size(), 0);
  for (size_t i = 0; i < pairs.size(); ++i) {
    auto [w, r] = pairs[i];
    char fill = g_verify ? static_cast<char>('a' + i) : 'x';
    threads.emplace_back([w = w, per, fill, &sent = sent[i]] {
      std::string chunk(64 * 1024, fill);
      while (sent < per) {
        ssize_t n = write(w, chunk.data(), std::min(chunk.size(), per - sent));
        if (n <= 0) break;
        sent += static_cast<size_t>(n);
      }
      shutdown(w, SHUT_WR);
    });
    threads.emplace_back([r = r, fill, &got = got[i], &bad = corrupt[i]] {
      char buf[65536];
      ssize_t n;
      while ((n = read(r, buf, sizeof buf)) > 0) {
        got += static_cast<size_t>(n);
        if (g_verify && !bad) {
          for (ssize_t k = 0; k < n; ++k) {
            if (buf[k] != fill) {
              bad = 1;
              break;
            }
          }
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  double secs = std::chrono::duration<double>(Clock::now() - start).count();
  bool ok = true;
  for (size_t i = 0; i < pairs.size(); ++i) {
    if (sent[i] != per || got[i] != per || corrupt[i]) {
      std::fprintf(stderr, "channel_bench: %s, stream %zu: wrote %zu of %zu bytes, read %zu%s\n",
                   what.c_str(), i, sent[i], per, got[i],
                   corrupt[i] ? ", and bytes that stream never wrote" : "");
      ok = false;
    }
  }
  return ok ? secs : -1;
}

}  // namespace

int main(int argc, char** argv) {
  bool smoke = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--smoke") == 0) {
      smoke = true;
    } else if (std::strcmp(argv[i], "--markdown") == 0) {
    } else {
      std::fprintf(stderr, "usage: channel_bench [--smoke] [--markdown]   (--smoke: 8 MiB per path, "
                           "bytes checked; exits 1 when a path fails)\n");
      return 2;
    }
  }
  if (smoke) {
    g_total = 8ull << 20;
    g_verify = true;
  }
  // Raw socketpair.
  int raw[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, raw) != 0) {
    std::perror("channel_bench: socketpair");
    return 1;
  }
  double raw_s = Pump("raw socketpair", {{raw[0], raw[1]}});
  close(raw[0]);
  close(raw[1]);

  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
    std::perror("channel_bench: socketpair");
    return 1;
  }
  MuxOptions h, g;
  g.role = MuxRole::kGuest;
  auto host_r = Mux::Create(sv[0], h);
  auto guest_r = Mux::Create(sv[1], g);
  if (!host_r.ok() || !guest_r.ok()) {
    std::fprintf(stderr, "channel_bench: Mux::Create: %s\n",
                 (host_r.ok() ? guest_r.error() : host_r.error()).ToString().c_str());
    return 1;
  }
  auto host = std::move(*host_r);
  auto guest = std::move(*guest_r);
  std::vector<int> accepted;
  std::mutex mu;
  guest->RegisterService("sink", [&](int fd, const std::vector<std::string>&) {
    std::lock_guard<std::mutex> l(mu);
    accepted.push_back(fd);
  });
  if (auto s = host->Start(); !s.ok()) {
    std::fprintf(stderr, "channel_bench: host mux start: %s\n", s.error().ToString().c_str());
    return 1;
  }
  if (auto s = guest->Start(); !s.ok()) {
    std::fprintf(stderr, "channel_bench: guest mux start: %s\n", s.error().ToString().c_str());
    return 1;
  }
  auto run = [&](int streams) {
    std::string what = "mux, " + std::to_string(streams) + " stream(s)";
    std::vector<std::pair<int, int>> pairs;
    for (int i = 0; i < streams; ++i) {
      auto fd = host->Open("sink", {});
      if (!fd.ok()) {
        std::fprintf(stderr, "channel_bench: %s: open: %s\n", what.c_str(),
                     fd.error().ToString().c_str());
        return -1.0;
      }
      auto deadline = Clock::now() + std::chrono::seconds(30);
      while (true) {
        std::lock_guard<std::mutex> l(mu);
        if (accepted.size() > static_cast<size_t>(i)) break;
        if (Clock::now() > deadline) {
          std::fprintf(stderr, "channel_bench: %s: the guest side never accepted stream %d\n",
                       what.c_str(), i);
          return -1.0;
        }
      }
      std::lock_guard<std::mutex> l(mu);
      pairs.push_back({*fd, accepted[i]});
    }
    double s = Pump(what, pairs);
    for (auto [a, b] : pairs) {
      close(a);
      close(b);
    }
    accepted.clear();
    return s;
  };
  double mux1 = run(1);
  double mux8 = run(8);
  if (raw_s <= 0 || mux1 <= 0 || mux8 <= 0) {
    std::fprintf(stderr, "channel_bench: a measured path failed\n");
    return 1;
  }
  double mib = static_cast<double>(g_total) / (1 << 20);
  std::printf("raw socketpair:      %8.1f MiB/s\n", mib / raw_s);
  std::printf("mux, 1 stream:       %8.1f MiB/s  (ratio to raw %.2f)\n", mib / mux1, raw_s / mux1);
  std::printf("mux, 8 streams:      %8.1f MiB/s  (ratio to raw %.2f)\n", mib / mux8, raw_s / mux8);
  if (smoke) std::printf("channel_bench: smoke OK (%.0f MiB per path, every byte checked)\n", mib);
  if (cloister::bench::Report::Wanted(argc, argv)) {
    using cloister::bench::Num;
    cloister::bench::Report r(
        "channel_bench",
        "Bytes through one host-guest Mux stream (two muxes over a socketpair, as over the "
        "virtio-serial port) and through 8 streams at once, against a bare socketpair; every byte "
        "is checked at the far end.",
        {"path", "MiB/s", "ratio to raw"});
    r.Row({"raw socketpair", Num("%.1f", mib / raw_s), "1.00"});
    r.Row({"mux, 1 stream", Num("%.1f", mib / mux1), Num("%.2f", raw_s / mux1)});
    r.Row({"mux, 8 streams", Num("%.1f", mib / mux8), Num("%.2f", raw_s / mux8)});
    r.Note(Num("%.0f MiB per path.", mib));
    r.Print(argc, argv);
  }
  return 0;
}
