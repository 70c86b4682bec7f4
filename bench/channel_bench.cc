// Channel throughput: bytes through one Mux stream (host mux <-> guest mux over a socketpair, as
// over the virtio-serial port) against the same bytes over a bare socketpair, in one run.
// Also 8 concurrent streams. Prints MiB/s and the ratio (mux / raw).
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <mutex>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "channel/mux.h"

using namespace cloister::channel;
using Clock = std::chrono::steady_clock;

constexpr size_t kTotal = 256ull << 20;

// Writes kTotal/n bytes into each fd and reads them back at the far ends; returns seconds.
double Pump(const std::vector<std::pair<int, int>>& pairs) {
  auto start = Clock::now();
  std::vector<std::thread> threads;
  size_t per = kTotal / pairs.size();
  for (auto [w, r] : pairs) {
    threads.emplace_back([w = w, per] {
      std::string chunk(64 * 1024, 'x');
      size_t sent = 0;
      while (sent < per) {
        ssize_t n = write(w, chunk.data(), std::min(chunk.size(), per - sent));
        if (n <= 0) break;
        sent += static_cast<size_t>(n);
      }
      shutdown(w, SHUT_WR);
    });
    threads.emplace_back([r = r] {
      char buf[65536];
      while (read(r, buf, sizeof buf) > 0) {
      }
    });
  }
  for (auto& t : threads) t.join();
  return std::chrono::duration<double>(Clock::now() - start).count();
}

int main() {
  // Raw socketpair.
  int raw[2];
  socketpair(AF_UNIX, SOCK_STREAM, 0, raw);
  double raw_s = Pump({{raw[0], raw[1]}});
  close(raw[0]);
  close(raw[1]);

  int sv[2];
  socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv);
  MuxOptions h, g;
  g.role = MuxRole::kGuest;
  auto host = Mux::Create(sv[0], h).value();
  auto guest = Mux::Create(sv[1], g).value();
  std::vector<int> accepted;
  std::mutex mu;
  guest->RegisterService("sink", [&](int fd, const std::vector<std::string>&) {
    std::lock_guard<std::mutex> l(mu);
    accepted.push_back(fd);
  });
  host->Start();
  guest->Start();
  auto run = [&](int streams) {
    std::vector<std::pair<int, int>> pairs;
    for (int i = 0; i < streams; ++i) {
      auto fd = host->Open("sink", {});
      if (!fd.ok()) return -1.0;
      while (true) {
        std::lock_guard<std::mutex> l(mu);
        if (accepted.size() > static_cast<size_t>(i)) break;
      }
      std::lock_guard<std::mutex> l(mu);
      pairs.push_back({*fd, accepted[i]});
    }
    double s = Pump(pairs);
    for (auto [a, b] : pairs) {
      close(a);
      close(b);
    }
    accepted.clear();
    return s;
  };
  double mux1 = run(1);
  double mux8 = run(8);
  double mib = static_cast<double>(kTotal) / (1 << 20);
  std::printf("raw socketpair:      %8.1f MiB/s\n", mib / raw_s);
  std::printf("mux, 1 stream:       %8.1f MiB/s  (ratio to raw %.2f)\n", mib / mux1, raw_s / mux1);
  std::printf("mux, 8 streams:      %8.1f MiB/s  (ratio to raw %.2f)\n", mib / mux8, raw_s / mux8);
  return 0;
}
