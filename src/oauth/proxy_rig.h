// What the oauth tests through the real proxy share (oauth_proxy_test.cc, oauth_capture_test.cc,
// oauth_refresh_timer_test.cc): a fake provider behind a fake upstream on 127.0.0.1, a temporary
// vault, and the real proxy with the oauth filters (AddOauthFilters) whose trace goes to
// ENV_DIR/trace.jsonl, reached by real curl through the resolve override (nothing leaves
// loopback). Tests only; the fixture owns every member.
#pragma once

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "oauth/test_util.h"
#include "oauth/wiring.h"
#include "proxy/test_env.h"
#include "vault/placeholder.h"

namespace cloister::oauth::testing {

// One provider's parameters for the tests that run per provider (Claude, Codex).
struct ProviderCase {
  bool jwt;
  std::string api_host, api_path, token_host, token_path;
};
inline void PrintTo(const ProviderCase& c, std::ostream* os) { *os << c.api_host; }

struct OauthProxyRig {
  // The fake provider (`jwt`: ChatGPT, else Claude) behind an upstream answering with `handler`
  // (null: the provider's own). Call with ASSERT_NO_FATAL_FAILURE.
  void StartProvider(bool jwt, proxy::testing::Handler handler = nullptr) {
    provider = std::make_unique<FakeProvider>(jwt);
    auto up = proxy::testing::FakeUpstream::Start(env.upstream_ca,
                                                  handler ? handler : provider->handler());
    ASSERT_TRUE(up.ok());
    upstream = std::move(up).value();
  }

  // The proxy with the oauth filters: `logins` join its credentials, `slots` and `create` are
  // AddOauthFilters' capture slots and capture persister; every host in `hosts` (port 443) is
  // routed to the upstream. Call with ASSERT_NO_FATAL_FAILURE.
  void StartProxy(const std::vector<std::string>& hosts,
                  const std::vector<vault::BoundCredential>& logins,
                  std::vector<vault::BoundCredential> slots = {},
                  LoginCustody::PersistFn create = nullptr) {
    proxy::ProxyConfig cfg;
    cfg.credentials = env.creds;
    // The refresh records go to the proxy's trace file (a second sink on it: O_APPEND lines).
    auto sink = proxy::TraceSink::Open(env.dir + "/trace.jsonl");
    ASSERT_TRUE(sink.ok());
    cfg.trace = *sink;
    cfg.credentials.insert(cfg.credentials.end(), logins.begin(), logins.end());
    auto f = AddOauthFilters(cfg, VaultPersister(tv.loc, vault::KeyBackend::kFile),
                             std::move(slots), std::move(create));
    ASSERT_TRUE(f.ok()) << f.error().ToString();
    filter = *f;
    env.creds = cfg.credentials;
    env.extension_filters = cfg.extension_filters;
    std::map<std::string, std::string> routes;
    for (const std::string& h : hosts) routes[h + ":443"] = upstream->Address();
    env.StartProxy(routes);
  }

  // Real curl through the proxy to https://HOST PATH with `extra` arguments.
  proxy::testing::CurlOut Curl(const std::string& host, const std::string& path,
                               const std::vector<std::string>& extra) {
    std::vector<std::string> args = {"--proxy", env.ProxyUrl(), "--cacert", env.ca_file};
    args.insert(args.end(), extra.begin(), extra.end());
    args.push_back("https://" + host + path);
    return proxy::testing::RunCurl(args);
  }

  // No token the provider issued (nor a JWT's signature) is in `bytes`.
  void ExpectNoRealToken(const std::string& bytes) {
    for (const std::string& t : provider->issued()) {
      EXPECT_EQ(bytes.find(t), std::string::npos) << "a real token reached the guest";
      std::string_view sig = vault::JwtSignature(t);
      if (!sig.empty()) {
        EXPECT_EQ(bytes.find(sig), std::string::npos);
      }
    }
  }

  proxy::testing::ProxyEnv env;
  TempVault tv;
  std::unique_ptr<FakeProvider> provider;
  std::unique_ptr<proxy::testing::FakeUpstream> upstream;
  std::shared_ptr<OauthFilter> filter;
};

}  // namespace cloister::oauth::testing
