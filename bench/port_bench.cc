// Published-port overhead, side by side in one run (issue 17's bench): the same bytes from a
// "guest" TCP server to a host client
//   port:  through a forwarded host port: the supervisor's PortForwarder (supervisor/ports.h), a
//          host Mux stream (kTcpService), the guest agent's real tcp service (guest/tcp_connect.h)
//          connecting to the server on loopback;
//   exec:  the same size over `cloister exec`'s path: the real exec server (guest/exec_server.h)
//          running `head -c N /dev/zero` on an exec stream, stdout read by the host;
//   mux:   one raw Mux stream (the channel bench's figure) between the same two muxes;
//   raw:   a bare socketpair;
// and connect latency: connect + first byte through the forwarded port vs a fresh exec of `true`
// vs a direct loopback connect. The host and guest muxes talk over a socketpair (as over the
// virtio-serial port), so this measures our software path, not TCG or virtio.
//
// Usage: port_bench [--smoke] [--markdown] [--mib N] [--connects N]
//   --markdown: also print the section of docs/benchmarks.md (bench/report.h).
//   --smoke: 1 MiB and 5 connects (seconds); exits 1 if any path fails or moves the wrong bytes.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
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

#include "channel/exec_client.h"
#include "channel/mux.h"
#include "guest/exec_server.h"
#include "guest/tcp_connect.h"
#include "protocol/contract.h"
#include "supervisor/ports.h"
#include "report.h"

using namespace cloister;
using Clock = std::chrono::steady_clock;

namespace {

double Seconds(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Reads to EOF; returns the byte count (or -1 on error).
long long Drain(int fd) {
  long long total = 0;
  char buf[65536];
  while (true) {
    ssize_t n = read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return -1;
    if (n == 0) return total;
    total += n;
  }
}

void WriteN(int fd, size_t n) {
  static const std::string chunk(64 * 1024, 'x');
  size_t sent = 0;
  while (sent < n) {
    ssize_t w = write(fd, chunk.data(), std::min(chunk.size(), n - sent));
    if (w <= 0) break;
    sent += static_cast<size_t>(w);
  }
}

// The "guest" server on 127.0.0.1: each connection gets one byte then `bytes` more, then EOF.
struct Server {
  int fd = -1;
  uint16_t port = 0;
  std::atomic<size_t> bytes{0};
  std::thread thread;
  bool Start() {
    fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || listen(fd, 64) != 0) return false;
    socklen_t len = sizeof a;
    getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    port = ntohs(a.sin_port);
    thread = std::thread([this] {
      while (true) {
        int c = accept4(fd, nullptr, nullptr, SOCK_CLOEXEC);
        if (c < 0) return;
        std::thread([this, c] {
          (void)!write(c, "!", 1);
          WriteN(c, bytes.load());
          shutdown(c, SHUT_WR);
          char b[256];
          while (read(c, b, sizeof b) > 0) {
          }
          close(c);
        }).detach();
      }
    });
    return true;
  }
  ~Server() {
    if (fd >= 0) shutdown(fd, SHUT_RDWR);
    if (thread.joinable()) thread.join();
    if (fd >= 0) close(fd);
  }
};

int Connect(uint16_t port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(port);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// Connect + first byte, then the rest: returns bytes after the first (or -1).
long long FetchThrough(uint16_t port, double* first_byte_s) {
  auto t0 = Clock::now();
  int fd = Connect(port);
  if (fd < 0) return -1;
  char c;
  if (read(fd, &c, 1) != 1 || c != '!') {
    close(fd);
    return -1;
  }
  if (first_byte_s) *first_byte_s = Seconds(t0);
  shutdown(fd, SHUT_WR);
  long long n = Drain(fd);
  close(fd);
  return n;
}

// `head -c N /dev/zero` over an exec stream; returns stdout's byte count (or -1).
long long ExecBytes(channel::Mux& host, size_t n) {
  auto stream = host.Open(protocol::kExecService, {});
  if (!stream.ok()) return -1;
  int out[2];
  if (pipe2(out, O_CLOEXEC) != 0) return -1;
  long long got = -1;
  std::thread reader([&] { got = Drain(out[0]); });
  channel::ExecRequest req;
  req.argv = n ? std::vector<std::string>{"head", "-c", std::to_string(n), "/dev/zero"}
               : std::vector<std::string>{"true"};
  req.user = "root";
  channel::ExecIo io;
  io.in = -1;
  io.out = out[1];
  io.err = 2;
  auto exit = channel::RunExec(*stream, req, io);
  close(out[1]);
  reader.join();
  close(out[0]);
  close(*stream);
  if (!exit.ok() || exit->ShellCode() != 0) return -1;
  return got;
}

}  // namespace

int main(int argc, char** argv) {
  bool smoke = false;
  size_t mib = 64;
  int connects = 50;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--smoke") {
      smoke = true;
    } else if (a == "--markdown") {
    } else if (a == "--mib" && i + 1 < argc) {
      mib = std::stoul(argv[++i]);
    } else if (a == "--connects" && i + 1 < argc) {
      connects = std::stoi(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: port_bench [--smoke] [--markdown] [--mib N] [--connects N]\n");
      return 2;
    }
  }
  if (smoke) {
    mib = 1;
    connects = 5;
  }
  const size_t total = mib << 20;
  bool failed = false;
  auto check = [&](const char* what, long long got, long long want) {
    if (got != want) {
      std::fprintf(stderr, "port_bench: FAIL %s: %lld bytes, expected %lld\n", what, got, want);
      failed = true;
    }
  };

  // Host and guest muxes over a socketpair; the guest serves the agent's real tcp and exec.
  int sv[2];
  socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv);
  channel::MuxOptions h, g;
  g.role = channel::MuxRole::kGuest;
  auto host = channel::Mux::Create(sv[0], h);
  auto guest = channel::Mux::Create(sv[1], g);
  if (!host.ok() || !guest.ok()) return 1;
  guest::ExecServerOptions eo;
  eo.switch_user = false;
  (*guest)->RegisterService(protocol::kTcpService, [](int fd, const std::vector<std::string>& args) {
    std::thread([fd, args] { guest::ServeTcpConnect(fd, args); }).detach();
  });
  (*guest)->RegisterService(protocol::kExecService, [&eo](int fd, const std::vector<std::string>&) {
    std::thread([fd, &eo] { guest::ServeExec(fd, eo); }).detach();
  });
  std::mutex mu;
  std::vector<int> sinks;
  (*guest)->RegisterService("bench-sink", [&](int fd, const std::vector<std::string>&) {
    std::lock_guard<std::mutex> l(mu);
    sinks.push_back(fd);
  });
  (*host)->Start();
  (*guest)->Start();
  channel::Mux* hm = host->get();

  vm::PortForwarder::Options po;
  po.open = [hm](uint16_t port, int fd) {
    hm->OpenAsync(protocol::kTcpService, {std::to_string(port)}, fd, [](cloister::Status) {});
  };
  vm::PortForwarder forwarder(po);
  Server server;
  if (!server.Start()) return 1;
  vm::PortSpec spec;
  spec.guest_port = server.port;
  auto bound = forwarder.AddForward(spec);
  if (!bound.ok()) {
    std::fprintf(stderr, "port_bench: %s\n", bound.error().ToString().c_str());
    return 1;
  }

  // Throughput.
  server.bytes = total;
  auto t0 = Clock::now();
  long long got = FetchThrough(bound->host_port, nullptr);
  double port_s = Seconds(t0);
  check("forwarded port", got, static_cast<long long>(total));

  t0 = Clock::now();
  got = ExecBytes(*hm, total);
  double exec_s = Seconds(t0);
  check("exec", got, static_cast<long long>(total));

  t0 = Clock::now();
  double mux_s = 0;
  {
    auto fd = hm->Open("bench-sink", {});
    int peer = -1;
    for (int i = 0; i < 5000 && peer < 0; ++i) {
      {
        std::lock_guard<std::mutex> l(mu);
        if (!sinks.empty()) peer = sinks.back();
      }
      if (peer < 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));  // bounded wait
    }
    if (!fd.ok() || peer < 0) {
      check("mux", -1, static_cast<long long>(total));
    } else {
      t0 = Clock::now();
      std::thread w([&] {
        WriteN(peer, total);
        shutdown(peer, SHUT_WR);
      });
      got = Drain(*fd);
      w.join();
      mux_s = Seconds(t0);
      check("mux", got, static_cast<long long>(total));
      close(*fd);
      close(peer);
    }
  }

  int raw[2];
  socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, raw);
  t0 = Clock::now();
  std::thread w([&] {
    WriteN(raw[0], total);
    shutdown(raw[0], SHUT_WR);
  });
  got = Drain(raw[1]);
  w.join();
  double raw_s = Seconds(t0);
  check("raw", got, static_cast<long long>(total));
  close(raw[0]);
  close(raw[1]);

  // Connect latency (connect + first byte), averaged.
  server.bytes = 0;
  double port_lat = 0, direct_lat = 0, exec_lat = 0;
  for (int i = 0; i < connects; ++i) {
    double s = 0;
    check("forwarded connect", FetchThrough(bound->host_port, &s), 0);
    port_lat += s;
    check("direct connect", FetchThrough(server.port, &s), 0);
    direct_lat += s;
    t0 = Clock::now();
    check("exec true", ExecBytes(*hm, 0), 0);
    exec_lat += Seconds(t0);
  }
  port_lat /= connects;
  direct_lat /= connects;
  exec_lat /= connects;

  auto mibs = [&](double s) { return s > 0 ? mib / s : 0.0; };
  std::printf("port_bench: %zu MiB, %d connects (host and guest muxes over a socketpair)\n", mib,
              connects);
  std::printf("  throughput  forwarded port %8.1f MiB/s\n", mibs(port_s));
  std::printf("              exec (head -c) %8.1f MiB/s  (port/exec %.2fx)\n", mibs(exec_s),
              exec_s > 0 ? exec_s / port_s : 0.0);
  std::printf("              raw mux stream %8.1f MiB/s  (port/mux %.2f)\n", mibs(mux_s),
              port_s > 0 ? mux_s / port_s : 0.0);
  std::printf("              socketpair     %8.1f MiB/s\n", mibs(raw_s));
  std::printf("  connect+first byte  forwarded %7.3f ms, direct loopback %7.3f ms, exec true %7.3f ms\n",
              port_lat * 1e3, direct_lat * 1e3, exec_lat * 1e3);
  forwarder.StopAll();
  (*host)->Stop();
  (*guest)->Stop();
  if (failed) {
    std::fprintf(stderr, "port_bench: a path failed\n");
    return 1;
  }
  if (smoke) std::printf("port_bench: smoke OK\n");
  if (cloister::bench::Report::Wanted(argc, argv)) {
    using cloister::bench::Num;
    cloister::bench::Report r(
        "port_bench",
        "The same bytes from a guest TCP server to a host client through a published port (the "
        "supervisor's forwarder, a host-opened `tcp` stream, the guest agent's real tcp service), "
        "through `exec`'s path, through a raw mux stream and a bare socketpair, and the latency "
        "of connect + first byte; host and guest muxes over a socketpair (our software path, not "
        "TCG or virtio).",
        {"path", "MiB/s", "connect + first byte"});
    r.Row({"forwarded port", Num("%.1f", mibs(port_s)), Num("%.3f ms", port_lat * 1e3)});
    r.Row({"exec (head -c)", Num("%.1f", mibs(exec_s)), Num("%.3f ms (exec true)", exec_lat * 1e3)});
    r.Row({"raw mux stream", Num("%.1f", mibs(mux_s)), "-"});
    r.Row({"socketpair / direct loopback", Num("%.1f", mibs(raw_s)),
           Num("%.3f ms", direct_lat * 1e3)});
    r.Note(Num("%zu MiB per path, %d connects.", mib, connects));
    r.Print(argc, argv);
  }
  return 0;
}
