// Proxy bench: in one run, on loopback with TLS on both legs, the same client against
//   direct     client -> fake upstream (TLS)
//   cloister   client -> our proxy (CONNECT, TLS interception) -> fake upstream (TLS)
//   mitmproxy  client -> mitmdump (Debian's package, if installed) -> fake upstream (TLS)
// The fake upstream is named bench.example.test: cloister's path CONNECTs to that name, which
// the proxy maps through its resolve override (it refuses a loopback address it is handed, see
// upstream_address.h); mitmproxy knows no override, so its path CONNECTs to 127.0.0.1:PORT.
// Reports requests/s (4 keep-alive connections), p50/p99 latency of sequential keep-alive requests
// (and the latency each proxy adds over direct), MB/s for a 1 GiB download (the median of
// --rounds downloads per path, the paths interleaved so a shared machine's load falls on all of
// them alike; each round's cloister/direct ratio too), and the CPU time the
// whole process (client, upstream and, when on the path, the proxy) spent per GiB of it: the
// proxy's own cost per GiB is cloister's figure minus direct's, and holds up on a loaded machine
// where MB/s does not; the proxy's loop threads' own CPU per GiB (schedstat) is printed beside it.
// --smoke: tiny sizes (seconds); exits 1 when any measured path fails (scripts/bench-smoke.sh).
// Usage: proxy_bench [--smoke] [--requests N] [--seconds S] [--bulk-mib M] [--rounds R]
//                    [--no-mitmproxy] [--bulk-key]
//                    [--only direct|cloister|mitmproxy] [--markdown]
//   --markdown: also print the section of docs/benchmarks.md (bench/report.h).
#include <openssl/ssl.h>
#include <signal.h>
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <thread>

#include "base/subprocess.h"
#include "proxy/fake_upstream.h"
#include "proxy/proxy.h"
#include "vault/credential.h"
#include "vault/placeholder.h"
#include "report.h"

namespace asio = boost::asio;
namespace ssl = asio::ssl;
namespace http = boost::beast::http;
using asio::ip::tcp;
using Clock = std::chrono::steady_clock;
using namespace cloister;
using namespace cloister::proxy;

namespace {

constexpr char kName[] = "bench.example.test";

struct Target {
  std::string name;
  uint16_t proxy_port = 0;   // 0: direct
  std::string ca_file;       // what the client trusts
  std::string connect_host;  // what CONNECT names (the port is the upstream's)
};

double ProcessCpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_stime.tv_sec + (u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

// CPU time of this process's threads whose name starts with `prefix` (the proxy's loops are
// cloister-px0..N), from each thread's schedstat (nanoseconds run, softirq work done in the
// thread's context included): the proxy's own cost measured, not a difference of two noisy totals.
double ThreadsCpuSeconds(const std::string& prefix) {
  double total = 0;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/task", ec)) {
    std::string comm, ns;
    if (FILE* f = std::fopen((e.path() / "comm").c_str(), "r")) {
      char buf[64] = {};
      if (std::fgets(buf, sizeof buf, f)) comm = buf;
      std::fclose(f);
    }
    if (comm.compare(0, prefix.size(), prefix) != 0) continue;
    if (FILE* f = std::fopen((e.path() / "schedstat").c_str(), "r")) {
      unsigned long long run = 0;
      if (std::fscanf(f, "%llu", &run) == 1) total += run / 1e9;
      std::fclose(f);
    }
  }
  return total;
}

// One client connection: optional CONNECT through a proxy, then TLS, then keep-alive requests.
class Conn {
 public:
  Conn(asio::io_context& io, const Target& t, uint16_t upstream_port)
      : ctx_(ssl::context::tls_client), sock_(io), upstream_port_(upstream_port) {
    buf_.reserve(256 * 1024);  // Beast reads capacity - size bytes per read (min 512)
    ctx_.load_verify_file(t.ca_file);
    ctx_.set_verify_mode(ssl::verify_peer);
    uint16_t port = t.proxy_port ? t.proxy_port : upstream_port;
    sock_.connect({asio::ip::make_address("127.0.0.1"), port});
    sock_.set_option(tcp::no_delay(true));
    if (t.proxy_port) {
      std::string authority = t.connect_host + ":" + std::to_string(upstream_port);
      std::string req = "CONNECT " + authority + " HTTP/1.1\r\nHost: " + authority + "\r\n\r\n";
      asio::write(sock_, asio::buffer(req));
      asio::streambuf resp;
      asio::read_until(sock_, resp, "\r\n\r\n");
      std::string line(asio::buffers_begin(resp.data()), asio::buffers_end(resp.data()));
      if (line.find(" 200") == std::string::npos) throw std::runtime_error("CONNECT failed");
    }
    tls_.emplace(std::move(sock_), ctx_);
    SSL_set_tlsext_host_name(tls_->native_handle(), kName);
    SSL_set1_host(tls_->native_handle(), kName);
    static const unsigned char alpn[] = "\x08http/1.1";
    SSL_set_alpn_protos(tls_->native_handle(), alpn, sizeof alpn - 1);
    tls_->handshake(ssl::stream_base::client);
  }
  // One GET; returns body bytes read.
  uint64_t Get(const std::string& path, const std::string& key = "") {
    http::request<http::empty_body> req{http::verb::get, path, 11};
    req.set(http::field::host, std::string(kName) + ":" + std::to_string(upstream_port_));
    if (!key.empty()) req.set("x-bench-key", key);
    http::write(*tls_, req);
    http::response_parser<http::buffer_body> p;
    p.body_limit(boost::none);
    http::read_header(*tls_, buf_, p);
    uint64_t total = 0;
    std::vector<char> chunk(256 * 1024);
    while (!p.is_done()) {
      p.get().body().data = chunk.data();
      p.get().body().size = chunk.size();
      boost::system::error_code ec;
      http::read(*tls_, buf_, p, ec);
      if (ec && ec != http::error::need_buffer) throw boost::system::system_error(ec);
      total += chunk.size() - p.get().body().size;
    }
    return total;
  }

 private:
  ssl::context ctx_;
  tcp::socket sock_;
  std::optional<ssl::stream<tcp::socket>> tls_;
  boost::beast::flat_buffer buf_;
  uint16_t upstream_port_;
};

struct Figures {
  double rps = 0, p50_us = 0, p99_us = 0, mbps = 0, cpu_s_per_gib = 0, proxy_s_per_gib = 0;
  bool ok = false;
};

Figures Measure(const Target& t, uint16_t upstream_port, int requests, double seconds) {
  Figures f;
  try {
    asio::io_context io;
    {  // latency: sequential keep-alive requests on one connection
      Conn c(io, t, upstream_port);
      for (int i = 0; i < 50; ++i) c.Get("/small");  // warm-up (leaf certificate, caches)
      std::vector<double> lat;
      for (int i = 0; i < requests; ++i) {
        auto t0 = Clock::now();
        c.Get("/small");
        lat.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
      }
      std::sort(lat.begin(), lat.end());
      f.p50_us = lat[lat.size() / 2];
      f.p99_us = lat[std::min(lat.size() - 1, lat.size() * 99 / 100)];
    }
    {  // throughput: 4 connections for `seconds`
      std::atomic<uint64_t> done{0};
      std::vector<std::thread> ts;
      auto end = Clock::now() + std::chrono::duration<double>(seconds);
      for (int k = 0; k < 4; ++k) {
        ts.emplace_back([&] {
          try {
            asio::io_context io2;
            Conn c(io2, t, upstream_port);
            while (Clock::now() < end) {
              c.Get("/small");
              ++done;
            }
          } catch (...) {
          }
        });
      }
      auto t0 = Clock::now();
      for (auto& th : ts) th.join();
      f.rps = done / std::chrono::duration<double>(Clock::now() - t0).count();
    }
    if (f.rps <= 0) throw std::runtime_error("no request completed in the throughput phase");
    f.ok = true;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", t.name.c_str(), e.what());
  }
  return f;
}

// One bulk download on a fresh connection: MB/s and the process's CPU per GiB; false on failure.
bool Bulk(const Target& t, uint16_t upstream_port, uint64_t bulk_bytes, const std::string& key,
          double& mbps, double& cpu_s_per_gib, double& proxy_s_per_gib) {
  try {
    asio::io_context io;
    Conn c(io, t, upstream_port);
    auto t0 = Clock::now();
    double cpu0 = ProcessCpuSeconds();
    double proxy0 = ThreadsCpuSeconds("cloister-px");
    uint64_t got = c.Get("/bulk", key);
    double s = std::chrono::duration<double>(Clock::now() - t0).count();
    if (got != bulk_bytes) {
      throw std::runtime_error("bulk download: " + std::to_string(got) + " of " +
                               std::to_string(bulk_bytes) + " bytes");
    }
    mbps = got / 1e6 / s;
    double gib = static_cast<double>(got) / (1 << 30);
    cpu_s_per_gib = (ProcessCpuSeconds() - cpu0) / gib;
    proxy_s_per_gib = (ThreadsCpuSeconds("cloister-px") - proxy0) / gib;
    return true;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s bulk: %s\n", t.name.c_str(), e.what());
    return false;
  }
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

bool WaitForPort(uint16_t port, std::chrono::seconds timeout) {
  auto deadline = Clock::now() + timeout;
  while (Clock::now() < deadline) {
    asio::io_context io;
    tcp::socket s(io);
    boost::system::error_code ec;
    s.connect({asio::ip::make_address("127.0.0.1"), port}, ec);
    if (!ec) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return false;
}

uint16_t FreePort() {
  asio::io_context io;
  tcp::acceptor a(io, {asio::ip::make_address("127.0.0.1"), 0});
  return a.local_endpoint().port();
}

}  // namespace

int main(int argc, char** argv) {
  int requests = 2000;
  double seconds = 3;
  uint64_t bulk_mib = 1024;
  int rounds = 3;
  bool mitm = true;
  bool with_key = false;
  std::string only;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : "0";
    if (a == "--no-mitmproxy") mitm = false;
    else if (a == "--bulk-key") with_key = true;
    else if (a == "--smoke") requests = 100, seconds = 0.3, bulk_mib = 16, rounds = 1;
    else if (a == "--only") only = v, ++i;
    else if (a == "--requests") requests = std::atoi(v), ++i;
    else if (a == "--seconds") seconds = std::atof(v), ++i;
    else if (a == "--bulk-mib") bulk_mib = std::strtoull(v, nullptr, 10), ++i;
    else if (a == "--rounds") rounds = std::max(1, std::atoi(v)), ++i;
  }
  const uint64_t bulk = bulk_mib << 20;
  char tmpl[] = "/tmp/cloister-bench-XXXXXX";
  std::string dir = mkdtemp(tmpl);

  auto upstream_ca = *CertAuthority::CreateInMemory("bench upstream CA");
  auto proxy_ca = *CertAuthority::CreateInMemory("bench proxy CA");
  std::string upstream_ca_file = testing::WriteTempFile(dir, "upstream-ca.pem", upstream_ca->cert_pem());
  std::string proxy_ca_file = testing::WriteTempFile(dir, "proxy-ca.pem", proxy_ca->cert_pem());
  auto upstream = testing::FakeUpstream::Start(upstream_ca, [bulk](const testing::SeenRequest& r,
                                                                   testing::ResponseWriter& w) {
    if (r.target == "/bulk") w.SendBulk(200, bulk);
    else w.Send(200, {{"Content-Type", "application/json"}}, "{\"ok\":true}");
  });
  if (!upstream.ok()) return 1;
  uint16_t up_port = (*upstream)->port();

  ProxyConfig cfg;
  cfg.workspace = "bench";
  cfg.ca = proxy_ca;
  cfg.upstream_ca_file = upstream_ca_file;
  cfg.threads = 2;
  // The proxy never connects to a loopback address DNS returned (upstream_address.h); the fake
  // upstream is reached through a resolve override, as in the tests.
  cfg.resolve[std::string(kName) + ":" + std::to_string(up_port)] = (*upstream)->Address();
  cfg.resolve_only = true;
  // --bulk-key: cloister's bulk request carries a credential's placeholder, which the proxy swaps
  // for the real value upstream; its response is then asked for in identity encoding and redacted
  // (every piece scanned for the real value's forms), as a git fetch with a token is.
  std::string bulk_key;
  if (with_key) {
    auto cred = vault::MakeCredential(vault::CredentialKind::kHeader,
                                      "bench-real-secret-0123456789abcdefghijklmnopqrstuvwxyz",
                                      {kName}, "x-bench-key", false);
    if (!cred.ok()) return 1;
    auto ph = vault::MakePlaceholder(std::string(32, 'S'), "bench", *cred);
    if (!ph.ok()) return 1;
    bulk_key = *ph;
    cfg.credentials.push_back({*cred, *ph});
  }
  auto ours = Proxy::Start(cfg);
  if (!ours.ok()) return 1;
  uint16_t our_port = *(*ours)->ListenLoopback();

  std::vector<Target> targets = {{"direct", 0, upstream_ca_file, ""},
                                 {"cloister", our_port, proxy_ca_file, kName}};
  if (!only.empty() && only != "mitmproxy") mitm = false;
  std::optional<std::thread> mitm_thread;
  uint16_t mitm_port = 0;
  if (mitm && ProgramExists("mitmdump")) {
    mitm_port = FreePort();
    std::string conf = dir + "/mitm";
    std::filesystem::create_directories(conf);
    mitm_thread.emplace([=] {
      RunOptions o;
      o.timeout = std::chrono::seconds(3600);
      (void)RunProcess({"mitmdump", "-q", "--listen-host", "127.0.0.1", "--listen-port",
                        std::to_string(mitm_port), "--set", "confdir=" + conf, "--set",
                        "ssl_verify_upstream_trusted_ca=" + upstream_ca_file, "--set",
                        "stream_large_bodies=1m", "--set", "connection_strategy=lazy"},
                       o);
    });
    if (WaitForPort(mitm_port, std::chrono::seconds(60)) &&
        std::filesystem::exists(conf + "/mitmproxy-ca-cert.pem")) {
      targets.push_back({"mitmproxy", mitm_port, conf + "/mitmproxy-ca-cert.pem", "127.0.0.1"});
    } else {
      std::fprintf(stderr, "mitmdump did not start\n");
      targets.push_back({"mitmproxy", 0, "", ""});  // reported as failed
    }
  } else if (mitm) {
    std::fprintf(stderr, "mitmdump not installed; skipping it\n");
  }
  if (!only.empty()) {
    std::erase_if(targets, [&](const Target& t) { return t.name != only && t.name != "direct"; });
  }

  std::printf("proxy bench: loopback, TLS both legs, %d sequential requests, 4 conns x %.1f s, "
              "%llu MiB download x %d rounds\n", requests, seconds,
              static_cast<unsigned long long>(bulk_mib), rounds);
  bool failed = false;
  std::map<std::string, Figures> all;
  for (const Target& t : targets) {
    Figures f;
    if (t.name != "mitmproxy" || t.proxy_port) f = Measure(t, up_port, requests, seconds);
    all[t.name] = f;
  }
  // Bulk: the paths take turns, round after round.
  std::map<std::string, std::vector<double>> mbps, cpu, proxy_cpu;
  for (int r = 0; r < rounds && bulk; ++r) {
    for (const Target& t : targets) {
      if (!all[t.name].ok) continue;
      double m = 0, c = 0, pc = 0;
      if (!Bulk(t, up_port, bulk, t.proxy_port ? bulk_key : "", m, c, pc)) {
        all[t.name].ok = false;
        continue;
      }
      mbps[t.name].push_back(m);
      cpu[t.name].push_back(c);
      proxy_cpu[t.name].push_back(pc);
    }
  }
  std::printf("%-10s %10s %10s %10s %12s %10s %10s\n", "path", "req/s", "p50 us", "p99 us",
              "added p50", "MB/s", "cpu s/GiB");
  const Figures& direct = all["direct"];
  for (const Target& t : targets) {
    Figures& f = all[t.name];
    if (!f.ok) {
      std::printf("%-10s failed\n", t.name.c_str());
      failed = true;
      continue;
    }
    f.mbps = Median(mbps[t.name]);
    f.cpu_s_per_gib = Median(cpu[t.name]);
    f.proxy_s_per_gib = Median(proxy_cpu[t.name]);
    std::printf("%-10s %10.0f %10.0f %10.0f %9.0f us %10.0f %10.2f\n", t.name.c_str(), f.rps,
                f.p50_us, f.p99_us, f.p50_us - direct.p50_us, f.mbps, f.cpu_s_per_gib);
    std::fflush(stdout);
  }
  if (all.count("mitmproxy") && all["mitmproxy"].ok && all["mitmproxy"].rps > 0) {
    std::printf("cloister/mitmproxy requests/s: %.1fx (goal >= 10x)\n",
                all["cloister"].rps / all["mitmproxy"].rps);
  }
  if (all["cloister"].ok && direct.ok) {
    std::printf("cloister added p50 latency: %.3f ms (goal < 1 ms)\n",
                (all["cloister"].p50_us - direct.p50_us) / 1000.0);
    if (bulk) {
      std::printf("cloister/direct bulk MB/s: %.2f (goal >= 0.6); the proxy's own CPU: %.2f s/GiB "
                  "(its threads: %.2f)\n",
                  all["cloister"].mbps / direct.mbps,
                  all["cloister"].cpu_s_per_gib - direct.cpu_s_per_gib,
                  all["cloister"].proxy_s_per_gib);
      std::printf("per round (MB/s direct / cloister = ratio):");
      for (size_t r = 0; r < mbps["cloister"].size() && r < mbps["direct"].size(); ++r) {
        std::printf("  %.0f / %.0f = %.2f", mbps["direct"][r], mbps["cloister"][r],
                    mbps["cloister"][r] / mbps["direct"][r]);
      }
      std::printf("\n");
    }
  }

  if (!failed && cloister::bench::Report::Wanted(argc, argv)) {
    using cloister::bench::Num;
    cloister::bench::Report r(
        "proxy_bench",
        "The same client on loopback with TLS on both legs, direct, through cloister's proxy "
        "(CONNECT, interception) and through mitmproxy: requests/s over 4 keep-alive connections, "
        "p50/p99 of sequential keep-alive requests, and a bulk download (median of the rounds, "
        "paths interleaved) with the CPU the whole process spent per GiB; the proxy's own cost is "
        "cloister's CPU minus direct's, which holds on a loaded machine where MB/s does not.",
        {"path", "requests/s", "p50", "p99", "added p50", "bulk MB/s", "CPU s/GiB"});
    for (const Target& t : targets) {
      const Figures& f = all[t.name];
      r.Row({t.name, Num("%.0f", f.rps), Num("%.0f us", f.p50_us), Num("%.0f us", f.p99_us),
             Num("%.0f us", f.p50_us - direct.p50_us), bulk ? Num("%.0f", f.mbps) : "-",
             bulk ? Num("%.2f", f.cpu_s_per_gib) : "-"});
    }
    std::string note = Num("%d sequential requests, 4 connections for %.1f s, %llu MiB x %d "
                           "rounds.", requests, seconds,
                           static_cast<unsigned long long>(bulk_mib), rounds);
    if (bulk && all["cloister"].ok && direct.ok) {
      note += Num(" Bulk cloister/direct %.2f; the proxy's own CPU %.2f s/GiB (its threads "
                  "%.2f).", all["cloister"].mbps / direct.mbps,
                  all["cloister"].cpu_s_per_gib - direct.cpu_s_per_gib,
                  all["cloister"].proxy_s_per_gib);
    }
    if (all.count("mitmproxy") && all["mitmproxy"].ok && all["mitmproxy"].rps > 0) {
      note += Num(" Requests/s cloister/mitmproxy %.1fx.", all["cloister"].rps /
                                                            all["mitmproxy"].rps);
    }
    r.Note(note);
    r.Print(argc, argv);
  }

  if (mitm_thread) {
    // Stop mitmdump: it is our child; find it by its unique listen port in /proc.
    for (const auto& e : std::filesystem::directory_iterator("/proc")) {
      std::string cmd;
      FILE* f = std::fopen((e.path() / "cmdline").c_str(), "r");
      if (!f) continue;
      char buf[4096];
      size_t n = std::fread(buf, 1, sizeof buf, f);
      std::fclose(f);
      cmd.assign(buf, n);
      if (cmd.find("mitmdump") != std::string::npos &&
          cmd.find(std::to_string(mitm_port)) != std::string::npos &&
          cmd.find(dir) != std::string::npos) {
        kill(std::stoi(e.path().filename()), SIGTERM);
      }
    }
    mitm_thread->join();
  }
  (*ours)->Stop();
  std::filesystem::remove_all(dir);
  return failed ? 1 : 0;
}
