// Shared fixture pieces for the proxy tests: credentials with placeholders, a proxy CA, an
// upstream CA, fake upstreams and the proxy itself, all on 127.0.0.1.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <mutex>
#include <optional>
#include <thread>

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

  // Starts the proxy with `resolve` (host:port -> 127.0.0.1:port); resolve_only is always on.
  void StartProxy(std::map<std::string, std::string> resolve,
                  vault::LlmBodyPolicy policy = vault::LlmBodyPolicy::kFlag,
                  size_t body_hold = 1 << 20) {
    ProxyConfig cfg;
    cfg.workspace = "ws";
    cfg.credentials = creds;
    cfg.llm_body_policy = policy;
    cfg.ca = ca;
    cfg.resolve = std::move(resolve);
    cfg.resolve_only = true;
    cfg.upstream_ca_file = upstream_ca_file;
    trace_path = dir + "/trace.jsonl";
    cfg.trace = *TraceSink::Open(trace_path);
    cfg.on_compromise = [this](const CompromiseEvent& e) {
      std::lock_guard<std::mutex> l(mu);
      events.push_back(e);
    };
    cfg.body_hold_bytes = body_hold;
    cfg.filters = filters;
    cfg.tunnel_ports = tunnel_ports;
    cfg.tunnel_hosts = tunnel_hosts;
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
  std::vector<std::shared_ptr<RequestFilter>> filters;  // set before StartProxy
  std::vector<uint16_t> tunnel_ports;                   // set before StartProxy
  std::vector<std::string> tunnel_hosts;
  std::unique_ptr<Proxy> proxy;
  uint16_t proxy_port = 0;
  std::mutex mu;
  std::vector<CompromiseEvent> events;
};

// An upstream that answers 200 "hello" to everything.
inline Handler Hello() {
  return [](const SeenRequest&, ResponseWriter& w) {
    w.Send(200, {{"Content-Type", "text/plain"}}, "hello");
  };
}

}  // namespace cloister::proxy::testing
