// Egress bench: the latency transparent mode adds over proxy mode for the same HTTPS request, side
// by side in one run, on loopback (TLS both legs, a fake upstream named bench.example.test mapped
// by the resolve override):
//   direct       client -> fake upstream
//   proxy        client -> relay -> Proxy::Serve: CONNECT bench.example.test:443, then TLS
//   transparent  client -> relay (writes "bench.example.test 443\n") -> Proxy::ServeTransparent
// Both proxied paths go through the same relay (testing::TransparentRelay), which stands for the
// guest agent's hop; the channel, the guest's nftables redirect and the agent itself are NOT in
// these figures (they are the same for both modes except that transparent mode adds the nft
// redirect and the SO_ORIGINAL_DST lookup in the guest). Reported, per path: p50/p99 of a new
// connection (TCP + CONNECT or header + TLS handshake + one GET) and of a keep-alive GET.
// --smoke: tiny sizes (seconds); exits 1 when any path fails (scripts/bench-smoke.sh).
// Usage: egress_bench [--smoke] [--markdown] [--connections N] [--requests N]
//   --markdown: also print the section of docs/benchmarks.md (bench/report.h).
#include <openssl/ssl.h>

#include <algorithm>
#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <optional>

#include "proxy/fake_upstream.h"
#include "proxy/proxy.h"
#include "proxy/transparent_relay.h"
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

struct Path {
  std::string name;
  uint16_t port = 0;      // where the client connects
  bool connect = false;   // send CONNECT first
  std::string ca_file;    // what the client trusts
};

class Conn {
 public:
  Conn(asio::io_context& io, const Path& p) : ctx_(ssl::context::tls_client), sock_(io) {
    buf_.reserve(64 * 1024);
    ctx_.load_verify_file(p.ca_file);
    ctx_.set_verify_mode(ssl::verify_peer);
    sock_.connect({asio::ip::make_address("127.0.0.1"), p.port});
    sock_.set_option(tcp::no_delay(true));
    if (p.connect) {
      std::string req = std::string("CONNECT ") + kName + ":443 HTTP/1.1\r\nHost: " + kName +
                        ":443\r\n\r\n";
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
  void Get() {
    http::request<http::empty_body> req{http::verb::get, "/small", 11};
    req.set(http::field::host, kName);
    http::write(*tls_, req);
    http::response<http::string_body> res;
    http::read(*tls_, buf_, res);
    if (res.result_int() != 200) throw std::runtime_error("status " + std::to_string(res.result_int()));
  }

 private:
  ssl::context ctx_;
  tcp::socket sock_;
  std::optional<ssl::stream<tcp::socket>> tls_;
  boost::beast::flat_buffer buf_;
};

struct Figures {
  double conn_p50 = 0, conn_p99 = 0, req_p50 = 0, req_p99 = 0;
  bool ok = false;
};

std::pair<double, double> P50P99(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return {v[v.size() / 2], v[std::min(v.size() - 1, v.size() * 99 / 100)]};
}

Figures Measure(const Path& p, int connections, int requests) {
  Figures f;
  try {
    asio::io_context io;
    for (int i = 0; i < 20; ++i) Conn(io, p).Get();  // warm-up: leaf certificate, caches
    std::vector<double> conn;
    for (int i = 0; i < connections; ++i) {
      auto t0 = Clock::now();
      Conn c(io, p);
      c.Get();
      conn.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
    }
    std::vector<double> req;
    Conn c(io, p);
    for (int i = 0; i < 50; ++i) c.Get();
    for (int i = 0; i < requests; ++i) {
      auto t0 = Clock::now();
      c.Get();
      req.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
    }
    std::tie(f.conn_p50, f.conn_p99) = P50P99(conn);
    std::tie(f.req_p50, f.req_p99) = P50P99(req);
    f.ok = true;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", p.name.c_str(), e.what());
  }
  return f;
}

}  // namespace

int main(int argc, char** argv) {
  int connections = 300, requests = 2000;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : "1";
    if (a == "--smoke") connections = 20, requests = 100;
    else if (a == "--connections") connections = std::max(1, std::atoi(v)), ++i;
    else if (a == "--requests") requests = std::max(1, std::atoi(v)), ++i;
  }
  char tmpl[] = "/tmp/cloister-egress-bench-XXXXXX";
  std::string dir = mkdtemp(tmpl);
  auto upstream_ca = *CertAuthority::CreateInMemory("bench upstream CA");
  auto proxy_ca = *CertAuthority::CreateInMemory("bench proxy CA");
  std::string upstream_ca_file = testing::WriteTempFile(dir, "upstream-ca.pem", upstream_ca->cert_pem());
  std::string proxy_ca_file = testing::WriteTempFile(dir, "proxy-ca.pem", proxy_ca->cert_pem());
  auto upstream = testing::FakeUpstream::Start(upstream_ca, [](const testing::SeenRequest&,
                                                               testing::ResponseWriter& w) {
    w.Send(200, {{"Content-Type", "application/json"}}, "{\"ok\":true}");
  });
  if (!upstream.ok()) return 1;

  ProxyConfig cfg;
  cfg.workspace = "bench";
  cfg.ca = proxy_ca;
  cfg.upstream_ca_file = upstream_ca_file;
  cfg.resolve[std::string(kName) + ":443"] = (*upstream)->Address();
  cfg.resolve_only = true;
  cfg.threads = 2;
  auto proxy = Proxy::Start(cfg);
  if (!proxy.ok()) return 1;
  auto proxy_relay = testing::TransparentRelay::Start(proxy->get(), "", false);
  auto transparent_relay =
      testing::TransparentRelay::Start(proxy->get(), std::string(kName) + " 443\n", true);
  if (!proxy_relay.ok() || !transparent_relay.ok()) return 1;

  std::vector<Path> paths = {{"direct", (*upstream)->port(), false, upstream_ca_file},
                             {"proxy", (*proxy_relay)->port(), true, proxy_ca_file},
                             {"transparent", (*transparent_relay)->port(), false, proxy_ca_file}};
  std::printf("egress bench: loopback, TLS both legs, %d new connections, %d keep-alive requests "
              "per path; the guest's nft redirect and the channel are not included\n",
              connections, requests);
  std::printf("%-12s %14s %14s %14s %14s\n", "path", "conn p50 us", "conn p99 us", "req p50 us",
              "req p99 us");
  std::map<std::string, Figures> all;
  bool failed = false;
  for (const Path& p : paths) {
    Figures f = Measure(p, connections, requests);
    all[p.name] = f;
    if (!f.ok) {
      std::printf("%-12s failed\n", p.name.c_str());
      failed = true;
      continue;
    }
    std::printf("%-12s %14.0f %14.0f %14.0f %14.0f\n", p.name.c_str(), f.conn_p50, f.conn_p99,
                f.req_p50, f.req_p99);
    std::fflush(stdout);
  }
  const Figures& px = all["proxy"];
  const Figures& tr = all["transparent"];
  if (px.ok && tr.ok) {
    std::printf("transparent - proxy: new connection p50 %+.0f us (%.2fx), keep-alive request "
                "p50 %+.0f us (%.2fx)\n",
                tr.conn_p50 - px.conn_p50, tr.conn_p50 / px.conn_p50, tr.req_p50 - px.req_p50,
                tr.req_p50 / px.req_p50);
  }
  if (!failed && cloister::bench::Report::Wanted(argc, argv)) {
    using cloister::bench::Num;
    cloister::bench::Report r(
        "egress_bench",
        "The same HTTPS GET on loopback (TLS both legs) direct, through the proxy in proxy mode "
        "(CONNECT) and in transparent mode (the guest agent's header line), both behind the same "
        "relay; the guest's nft redirect and the channel are not included.",
        {"path", "new connection p50", "p99", "keep-alive request p50", "p99"});
    for (const Path& p : paths) {
      const Figures& f = all[p.name];
      r.Row({p.name, Num("%.0f us", f.conn_p50), Num("%.0f us", f.conn_p99),
             Num("%.0f us", f.req_p50), Num("%.0f us", f.req_p99)});
    }
    r.Note(Num("%d new connections and %d keep-alive requests per path; transparent against "
               "proxy: new connection p50 %.2fx, keep-alive request p50 %.2fx.",
               connections, requests, tr.conn_p50 / px.conn_p50, tr.req_p50 / px.req_p50));
    r.Print(argc, argv);
  }
  proxy_relay->reset();
  transparent_relay->reset();
  (*proxy)->Stop();
  std::filesystem::remove_all(dir);
  return failed ? 1 : 0;
}
