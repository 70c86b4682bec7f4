// The host-side refresh timer: the workspace's supervisor (the one owner of its logins) refreshes
// each login in custody before its access token expires, whether or not the guest's client asks.
//
// When (RefreshDueAt): at `at_fraction` (80%) of the token's lifetime (from its last refresh to
// its expiry), but at least `min_lead_ms` before expiry, minus a jitter drawn once per login
// (so many workspaces do not refresh at one instant). A failed refresh is retried after
// `retry_initial_ms`, doubling up to `retry_max_ms`, each with jitter (RetryDelay). A login whose
// expiry is unknown is left to the guest's client. A refresh the guest's client made meanwhile
// moves the next one (the due time is computed from the custody at every pass).
//
// How: the refresh is sent THROUGH the workspace's own proxy (ProxyRefresher: CONNECT, TLS with
// the proxy's CA, a POST to the token endpoint carrying the refresh placeholder, as the guest's
// client sends it), so it takes the one path every refresh takes (LoginCustody::BeginRefresh /
// CompleteRefresh: one in flight, the refresh record, saved before current, traced as
// "oauth-refresh:<id>", the egress policy). A failure is saved in the login's refresh record
// (`refresh_error`, shown by `cred ls`).
//
// Threading: Start() runs one thread that sleeps until the next due time; Stop() wakes and joins
// it (idempotent, also from the destructor). RunDue() is that thread's body, callable by tests
// with their own clock.
// SECURITY: never sees a real token (it sends placeholders to the proxy and reads its answer,
// which carries placeholders only).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "base/result.h"
#include "oauth/custody.h"

namespace cloister::oauth {

struct RefreshPolicy {
  double at_fraction = 0.8;
  int64_t min_lead_ms = 5 * 60 * 1000;
  int64_t max_jitter_ms = 60 * 1000;
  int64_t retry_initial_ms = 30 * 1000;
  int64_t retry_max_ms = 15 * 60 * 1000;
};

// Unix ms at which a login refreshed at `issued_ms` (0: unknown) and expiring at `expires_ms`
// is due; `jitter_ms` in [0, max_jitter_ms] is subtracted. 0 when the expiry is unknown.
int64_t RefreshDueAt(int64_t issued_ms, int64_t expires_ms, int64_t jitter_ms,
                     const RefreshPolicy& policy);
// The wait after the `failures`-th failure in a row (>= 1), plus `jitter_ms`.
int64_t RetryDelay(int failures, int64_t jitter_ms, const RefreshPolicy& policy);

class RefreshTimer {
 public:
  // One refresh of `login`; the HTTP status the proxy answered, or an error (no answer).
  using RefreshFn = std::function<Result<int>(LoginCustody& login)>;

  RefreshTimer(std::vector<std::shared_ptr<LoginCustody>> logins, RefreshFn refresh,
               RefreshPolicy policy = {}, LoginCustody::Clock clock = nullptr,
               uint64_t seed = 0);
  ~RefreshTimer();
  RefreshTimer(const RefreshTimer&) = delete;
  RefreshTimer& operator=(const RefreshTimer&) = delete;

  void Start();
  void Stop();

  // Refreshes every login due at `now_ms`; returns the earliest next due time (0: none).
  int64_t RunDue(int64_t now_ms);
  // Failures in a row of login `i` (its position in the constructor's vector).
  int failures(size_t i);

 private:
  struct Slot {
    std::shared_ptr<LoginCustody> login;
    int64_t jitter_ms = 0;
    int failures = 0;
    int64_t retry_at_ms = 0;
  };
  std::vector<Slot> slots_;
  RefreshFn refresh_;
  RefreshPolicy policy_;
  LoginCustody::Clock clock_;
  uint64_t rng_;

  std::mutex mu_;  // guards slots_' counters and stop_
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

// The RefreshFn of a running workspace: `connect` gives a stream socket connected to the
// workspace's proxy (the supervisor: a socketpair whose other end it hands to Proxy::Serve;
// tests: TCP to its loopback port); `proxy_ca_pem` is the CA the proxy's leaves chain to.
// The request per kind (as the pinned clients send it, docs/design.md "Subscription logins"):
//   Claude:  POST https://<token host>/v1/oauth/token {"grant_type":"refresh_token",
//            "refresh_token":<placeholder>,"client_id":"9d1c250a-...","scope":<scopes>}
//   ChatGPT: POST https://<token host>/oauth/token {"client_id":"app_EMoamEEZ73f0CkXaXp7hrann",
//            "grant_type":"refresh_token","refresh_token":<placeholder>,"scope":"openid profile email"}
// Bounded: 30 s per socket operation, a 256 KiB answer.
RefreshTimer::RefreshFn ProxyRefresher(std::function<Result<int>()> connect,
                                       std::string proxy_ca_pem);

}  // namespace cloister::oauth
