// Shared fixture pieces for the proxy tests: credentials with placeholders, a proxy CA, an
// upstream CA, fake upstreams and the proxy itself, all on 127.0.0.1.
#pragma once

#include <gtest/gtest.h>
#include <openssl/ssl.h>
#include <stdlib.h>

#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>

#include <cstdio>
#include <filesystem>
#include <mutex>
#include <optional>
#include <thread>

#include "base/subprocess.h"
#include "proxy/consent_filter.h"
#include "proxy/fake_upstream.h"
#include "proxy/proxy.h"
#include "vault/placeholder.h"

namespace cloister::proxy::testing {

inline const std::string kSalt(32, 'S');
inline const std::string kRealAnthropic =
    "sk-ant-api03-REALxANTHROPICxSECRETx0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ012345-_AA";
inline const std::string kRealGithub = "ghp_REALGITHUBSECRET0123456789abcdefgh";
inline const std::string kRealOpenai = "sk-proj-REALxOPENAIxSECRETx0123456789abcdefghijklmnopqrstuvwxyz";

inline vault::BoundCredential Bind(vault::CredentialKind kind, const std::string& real,
                                   std::vector<std::string> hosts = {},
                                   const std::string& header = "", bool body = false) {
  auto c = vault::MakeCredential(kind, real, hosts, header, body);
  EXPECT_TRUE(c.ok());
  auto ph = vault::MakePlaceholder(kSalt, "ws", *c);
  EXPECT_TRUE(ph.ok());
  return {*c, *ph};
}

// What real curl did: the HTTP status and the proxy's answer to CONNECT (0: none), the body and
// stderr.
struct CurlOut {
  int code = 0;
  int connect = 0;
  std::string body, err;
};

// Runs real curl with `args`, none of the host's proxy or CA variables, a 30 s limit.
inline CurlOut RunCurl(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {"curl", "-sS", "--max-time", "30", "-w",
                                   "\n%{http_code} %{http_connect}"};
  argv.insert(argv.end(), args.begin(), args.end());
  RunOptions opts;
  opts.env_unset = {"http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY",
                    "all_proxy", "NO_PROXY", "no_proxy", "CURL_CA_BUNDLE", "SSL_CERT_FILE"};
  opts.timeout = std::chrono::seconds(60);
  auto out = RunProcess(argv, opts);
  EXPECT_TRUE(out.ok());
  CurlOut r;
  if (!out.ok()) return r;
  size_t nl = out->out.rfind('\n');
  r.body = out->out.substr(0, nl == std::string::npos ? 0 : nl);
  if (nl != std::string::npos) sscanf(out->out.c_str() + nl + 1, "%d %d", &r.code, &r.connect);
  r.err = out->err;
  return r;
}

class ProxyEnv {
 public:
  ProxyEnv() {
    char tmpl[] = "/tmp/cloister-proxy-XXXXXX";
    dir = mkdtemp(tmpl);
    ca = *CertAuthority::CreateInMemory("test proxy CA");
    upstream_ca = *CertAuthority::CreateInMemory("test upstream CA");
    ca_file = WriteTempFile(dir, "proxy-ca.pem", ca->cert_pem());
    upstream_ca_file = WriteTempFile(dir, "upstream-ca.pem", upstream_ca->cert_pem());
    creds = {Bind(vault::CredentialKind::kAnthropic, kRealAnthropic),
             Bind(vault::CredentialKind::kGithub, kRealGithub),
             Bind(vault::CredentialKind::kOpenai, kRealOpenai)};
  }
  ~ProxyEnv() {
    proxy.reset();
    std::filesystem::remove_all(dir);
  }
  const std::string& Placeholder(size_t i) const { return creds[i].placeholder; }

  // Starts the proxy with `resolve` (host:port -> 127.0.0.1:port); resolve_only is on unless a
  // test turns it off (only tests whose names resolve from /etc/hosts, never the network).
  void StartProxy(std::map<std::string, std::string> resolve,
                  vault::LlmBodyPolicy policy = vault::LlmBodyPolicy::kFlag,
                  size_t body_hold = 1 << 20) {
    ProxyConfig cfg;
    cfg.workspace = "ws";
    cfg.credentials = creds;
    cfg.llm_body_policy = policy;
    cfg.ca = ca;
    cfg.resolve = std::move(resolve);
    cfg.resolve_only = resolve_only;
    cfg.upstream_ca_file = upstream_ca_file;
    trace_path = dir + "/trace.jsonl";
    cfg.trace = *TraceSink::Open(trace_path);
    cfg.on_compromise = [this](const CompromiseEvent& e) {
      std::lock_guard<std::mutex> l(mu);
      events.push_back(e);
    };
    cfg.body_hold_bytes = body_hold;
    cfg.extension_filters = extension_filters;
    cfg.tunnel_ports = tunnel_ports;
    cfg.tunnel_hosts = tunnel_hosts;
    cfg.egress_policy = egress_policy;
    cfg.transparent_sniff_ms = sniff_ms;
    cfg.upstream_connect_ms = upstream_connect_ms;
    cfg.upstream_idle_ms = upstream_idle_ms;
    cfg.consent = consent;
    auto p = Proxy::Start(std::move(cfg));
    ASSERT_TRUE(p.ok()) << p.error().ToString();
    proxy = std::move(p).value();
    auto port = proxy->ListenLoopback();
    ASSERT_TRUE(port.ok());
    proxy_port = *port;
  }
  std::string ProxyUrl() const { return "http://127.0.0.1:" + std::to_string(proxy_port); }
  // The trace, once it holds at least n records (the proxy writes a record after the response
  // went out, so a client can be faster than the record). Bounded wait.
  std::vector<TraceRecord> TraceAtLeast(size_t n) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    for (;;) {
      auto recs = ReadTrace(trace_path);
      if ((recs.ok() && recs->size() >= n) || std::chrono::steady_clock::now() > deadline) {
        return recs.ok() ? *recs : std::vector<TraceRecord>{};
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
  std::vector<CompromiseEvent> Events() {
    std::lock_guard<std::mutex> l(mu);
    return events;
  }

  std::string dir;
  std::shared_ptr<CertAuthority> ca, upstream_ca;
  std::string ca_file, upstream_ca_file, trace_path;
  std::vector<vault::BoundCredential> creds;  // 0 anthropic, 1 github, 2 openai
  std::vector<std::shared_ptr<ExtensionFilter>> extension_filters;  // set before StartProxy
  std::vector<uint16_t> tunnel_ports;                   // set before StartProxy
  std::vector<std::string> tunnel_hosts;
  EgressPolicy egress_policy;  // set before StartProxy
  int sniff_ms = 1000;         // transparent mode's wait for a client's first bytes
  int upstream_connect_ms = 30000;       // ProxyConfig's bounds on the upstream
  int upstream_idle_ms = 11 * 60 * 1000;
  std::shared_ptr<ConsentGate> consent;  // set before StartProxy (consent_filter.h)
  bool resolve_only = true;    // set before StartProxy
  std::unique_ptr<Proxy> proxy;
  uint16_t proxy_port = 0;
  std::mutex mu;
  std::vector<CompromiseEvent> events;
};

// A raw client through the proxy: CONNECT `connect_host`:443, then TLS trusting the proxy CA with
// SNI `sni` and the given ALPN list, then whatever bytes the test writes (one TLS write each, so
// a body can be split across records and chunks exactly where a test wants).
class TunnelClient {
 public:
  TunnelClient(uint16_t proxy_port, const std::string& ca_file, const std::string& connect_host,
               const std::string& sni, const std::string& alpn_wire = std::string("\x08http/1.1"))
      : ctx_(boost::asio::ssl::context::tls_client), tls_(io_, ctx_) {
    namespace asio = boost::asio;
    boost::system::error_code ec;
    ctx_.load_verify_file(ca_file, ec);
    ctx_.set_verify_mode(asio::ssl::verify_peer, ec);
    auto& sock = tls_.next_layer();
    sock.connect({asio::ip::make_address("127.0.0.1"), proxy_port}, ec);
    if (ec) return;
    std::string req = "CONNECT " + connect_host + ":443 HTTP/1.1\r\nHost: " + connect_host +
                      ":443\r\n\r\n";
    asio::write(sock, asio::buffer(req), ec);
    std::string head;
    char c;
    while (!ec && head.find("\r\n\r\n") == std::string::npos && head.size() < 4096) {
      asio::read(sock, asio::buffer(&c, 1), ec);
      if (!ec) head.push_back(c);
    }
    if (ec || head.rfind("HTTP/1.1 200", 0) != 0) return;
    SSL* ssl = tls_.native_handle();
    SSL_set_tlsext_host_name(ssl, sni.c_str());
    SSL_set1_host(ssl, sni.c_str());
    if (!alpn_wire.empty()) {
      SSL_set_alpn_protos(ssl, reinterpret_cast<const unsigned char*>(alpn_wire.data()),
                          static_cast<unsigned>(alpn_wire.size()));
    }
    tls_.handshake(asio::ssl::stream_base::client, ec);
    ok_ = !ec;
  }
  bool ok() const { return ok_; }
  // The ALPN protocol the proxy selected ("" if none).
  std::string Alpn() {
    const unsigned char* p = nullptr;
    unsigned len = 0;
    SSL_get0_alpn_selected(tls_.native_handle(), &p, &len);
    return std::string(reinterpret_cast<const char*>(p ? p : reinterpret_cast<const unsigned char*>("")), len);
  }
  bool Write(const std::string& data) {
    boost::system::error_code ec;
    boost::asio::write(tls_, boost::asio::buffer(data), ec);
    return !ec;
  }
  // Reads one response (status 0 when none could be read).
  boost::beast::http::response<boost::beast::http::string_body> Read() {
    boost::beast::http::response_parser<boost::beast::http::string_body> p;
    p.body_limit(boost::none);
    boost::system::error_code ec;
    boost::beast::http::read(tls_, buf_, p, ec);
    auto res = p.release();
    if (ec) res.result(0);
    return res;
  }
  // After a 101: reads until `n` bytes arrived (or the stream ends).
  std::string ReadRaw(size_t n) {
    std::string got(static_cast<const char*>(buf_.data().data()), buf_.size());
    buf_.consume(buf_.size());
    char b[4096];
    boost::system::error_code ec;
    while (got.size() < n) {
      size_t k = tls_.read_some(boost::asio::buffer(b), ec);
      if (ec) break;
      got.append(b, k);
    }
    return got;
  }

 private:
  boost::asio::io_context io_;
  boost::asio::ssl::context ctx_;
  boost::asio::ssl::stream<boost::asio::ip::tcp::socket> tls_;
  boost::beast::flat_buffer buf_;
  bool ok_ = false;
};

// An upstream that answers 200 "hello" to everything.
inline Handler Hello() {
  return [](const SeenRequest&, ResponseWriter& w) {
    w.Send(200, {{"Content-Type", "text/plain"}}, "hello");
  };
}

}  // namespace cloister::proxy::testing
