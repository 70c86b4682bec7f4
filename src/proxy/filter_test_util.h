// Test support for the chain's filters: a proxy context without sockets, and an exchange over a
// Beast request head built in the test.
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <boost/beast/http.hpp>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "proxy/filter.h"
#include "proxy/test_env.h"

namespace cloister::proxy::testing {

class FilterHarness {
 public:
  // Credentials: the ProxyEnv ones (0 anthropic, 1 github, 2 openai) plus `extra`.
  explicit FilterHarness(std::vector<vault::BoundCredential> extra = {}) {
    ProxyEnv env;
    config.credentials = env.creds;
    for (auto& b : extra) config.credentials.push_back(std::move(b));
    Reset();
  }
  // Rebuilds the context after a test changed `config`.
  void Reset() {
    std::vector<std::string> phs;
    for (const auto& b : config.credentials) phs.push_back(b.placeholder);
    set = std::make_unique<PlaceholderSet>(phs);
    ctx.config = &config;
    ctx.placeholders = set.get();
    ctx.tripped = &tripped;
  }
  const std::string& Placeholder(size_t i) const { return config.credentials[i].placeholder; }
  const std::string& Real(size_t i) const { return config.credentials[i].credential.value; }

  // An exchange for `method target` with `headers` (in order) on `origin`.
  std::unique_ptr<Exchange> Make(const std::string& method, const std::string& target,
                                 std::vector<std::pair<std::string, std::string>> headers) {
    req = std::make_unique<boost::beast::http::request<boost::beast::http::empty_body>>();
    req->method_string(method);
    req->target(target);
    req->version(11);
    for (const auto& [k, v] : headers) req->insert(k, v);
    auto ex = std::make_unique<Exchange>(ctx, origin, *req);
    ex->rec.method = method;
    ex->raw_target = target;
    ex->hold_limit = config.body_hold_bytes;
    return ex;
  }
  // A TLS-intercepted origin (CONNECT host:443, SNI = host).
  void Tls(const std::string& host) {
    origin = Origin{};
    origin.tls = true;
    origin.connect = {host, 443};
    origin.sni = host;
  }

  ProxyConfig config;
  std::unique_ptr<PlaceholderSet> set;
  std::atomic<bool> tripped{false};
  ProxyContext ctx;
  Origin origin;  // proxy mode, plain HTTP unless a test sets it
  std::unique_ptr<boost::beast::http::request<boost::beast::http::empty_body>> req;
};

}  // namespace cloister::proxy::testing
