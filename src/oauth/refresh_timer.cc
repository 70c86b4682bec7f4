#include "oauth/refresh_timer.h"

#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <chrono>
#include <nlohmann/json.hpp>
#include <random>

#include "base/strings.h"
#include "oauth/token_body.h"

namespace cloister::oauth {
namespace {

uint64_t SplitMix(uint64_t& x) {
  uint64_t z = (x += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

}  // namespace

int64_t RefreshDueAt(int64_t issued_ms, int64_t expires_ms, int64_t jitter_ms,
                     const RefreshPolicy& policy) {
  if (expires_ms <= 0) return 0;
  int64_t latest = expires_ms - policy.min_lead_ms;
  int64_t due = latest;
  if (issued_ms > 0 && issued_ms < expires_ms) {
    int64_t lifetime = expires_ms - issued_ms;
    due = std::min(latest, issued_ms + static_cast<int64_t>(lifetime * policy.at_fraction));
  }
  due -= std::clamp<int64_t>(jitter_ms, 0, policy.max_jitter_ms);
  return std::max<int64_t>(due, 1);
}

int64_t RetryDelay(int failures, int64_t jitter_ms, const RefreshPolicy& policy) {
  int64_t d = policy.retry_initial_ms;
  for (int i = 1; i < failures && d < policy.retry_max_ms; ++i) d *= 2;
  return std::min(d, policy.retry_max_ms) + std::clamp<int64_t>(jitter_ms, 0, policy.max_jitter_ms);
}

RefreshTimer::RefreshTimer(std::vector<std::shared_ptr<LoginCustody>> logins, RefreshFn refresh,
                           RefreshPolicy policy, LoginCustody::Clock clock, uint64_t seed)
    : refresh_(std::move(refresh)),
      policy_(policy),
      clock_(clock ? std::move(clock) : LoginCustody::Clock(SystemMs)),
      rng_(seed ? seed : std::random_device{}() ^ static_cast<uint64_t>(SystemMs())) {
  for (auto& l : logins) {
    Slot s;
    s.login = std::move(l);
    s.jitter_ms = policy_.max_jitter_ms > 0
                      ? static_cast<int64_t>(SplitMix(rng_) % (policy_.max_jitter_ms + 1))
                      : 0;
    slots_.push_back(std::move(s));
  }
}

RefreshTimer::~RefreshTimer() { Stop(); }

int RefreshTimer::failures(size_t i) {
  std::lock_guard<std::mutex> l(mu_);
  return i < slots_.size() ? slots_[i].failures : 0;
}

int64_t RefreshTimer::RunDue(int64_t now_ms) {
  int64_t next = 0;
  for (size_t i = 0; i < slots_.size(); ++i) {
    Slot& s = slots_[i];
    LoginCustody& login = *s.login;
    if (!login.has_login()) continue;  // a capture slot before its login
    int64_t due;
    {
      std::lock_guard<std::mutex> l(mu_);
      if (stop_) return 0;
      due = s.failures > 0 ? s.retry_at_ms
                           : RefreshDueAt(login.last_refresh_ms(), login.expires_at_ms(),
                                          s.jitter_ms, policy_);
    }
    if (due == 0) continue;  // expiry unknown: the guest's client decides
    if (now_ms >= due && login.state() == RefreshState::kIdle) {
      Result<int> status = refresh_(login);
      std::lock_guard<std::mutex> l(mu_);
      if (status.ok() && *status == 200) {
        s.failures = 0;
        due = RefreshDueAt(login.last_refresh_ms(), login.expires_at_ms(), s.jitter_ms, policy_);
      } else {
        ++s.failures;
        int64_t jitter = static_cast<int64_t>(SplitMix(rng_) % (policy_.max_jitter_ms + 1));
        s.retry_at_ms = now_ms + RetryDelay(s.failures, jitter, policy_);
        due = s.retry_at_ms;
        if (!status.ok()) {
          login.NoteRefreshFailure("host refresh: " + status.error().message());
        }
      }
    } else if (now_ms >= due) {
      due = now_ms + 1000;  // the guest's own refresh is in flight: look again shortly
    }
    if (due > 0 && (next == 0 || due < next)) next = due;
  }
  return next;
}

void RefreshTimer::Start() {
  std::lock_guard<std::mutex> l(mu_);
  if (thread_.joinable() || stop_) return;
  thread_ = std::thread([this] {
    for (;;) {
      int64_t next = RunDue(clock_());
      std::unique_lock<std::mutex> l(mu_);
      if (stop_) return;
      // Wake at the next due time, and at least every minute (a capture or a guest refresh
      // changes the plan; the clock may jump).
      int64_t wait = next == 0 ? 60000 : std::clamp<int64_t>(next - clock_(), 10, 60000);
      cv_.wait_for(l, std::chrono::milliseconds(wait), [this] { return stop_; });
      if (stop_) return;
    }
  });
}

void RefreshTimer::Stop() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id()) thread_.join();
}

RefreshTimer::RefreshFn ProxyRefresher(std::function<Result<int>()> connect,
                                       std::string proxy_ca_pem) {
  return [connect = std::move(connect), ca = std::move(proxy_ca_pem)](
             LoginCustody& login) -> Result<int> {
    namespace asio = boost::asio;
    bool claude = login.kind() == vault::CredentialKind::kClaudeSubscription;
    if (login.token_hosts().empty()) {
      return Error(ErrorCode::kFailedPrecondition, "login " + login.id() + " has no token host");
    }
    const std::string host = login.token_hosts().front();
    const std::string path = claude ? "/v1/oauth/token" : "/oauth/token";
    nlohmann::json body = {{"grant_type", "refresh_token"},
                           {"refresh_token", login.refresh_placeholder()}};
    if (claude) {
      body["client_id"] = "9d1c250a-e61b-44d9-88ed-5944d1962f5e";
      body["scope"] = Join(login.scopes(), " ");
    } else {
      body["client_id"] = "app_EMoamEEZ73f0CkXaXp7hrann";
      body["scope"] = "openid profile email";
    }
    std::string payload = body.dump();

    ASSIGN_OR_RETURN(int fd, connect());
    timeval tv{30, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    sockaddr_storage ss{};
    socklen_t len = sizeof ss;
    int family = getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) == 0 ? ss.ss_family
                                                                               : AF_UNIX;
    asio::io_context io;
    asio::ssl::context ctx(asio::ssl::context::tls_client);
    boost::system::error_code ec;
    ctx.add_certificate_authority(asio::buffer(ca), ec);
    if (ec) {
      close(fd);
      return Error(ErrorCode::kInvalidArgument, "refresh timer: the proxy CA: " + ec.message());
    }
    ctx.set_verify_mode(asio::ssl::verify_peer);
    asio::ssl::stream<asio::generic::stream_protocol::socket> tls(io, ctx);
    tls.next_layer().assign(asio::generic::stream_protocol(family, SOCK_STREAM), fd, ec);
    if (ec) {
      close(fd);
      return Error(ErrorCode::kIo, "refresh timer: " + ec.message());
    }
    auto fail = [&](const std::string& what) {
      return Error(ErrorCode::kUnavailable, "refresh timer: " + what + (ec ? ": " + ec.message() : ""));
    };
    std::string connect_req = "CONNECT " + host + ":443 HTTP/1.1\r\nHost: " + host + ":443\r\n\r\n";
    asio::write(tls.next_layer(), asio::buffer(connect_req), ec);
    if (ec) return fail("CONNECT");
    std::string head;
    char c;
    while (head.find("\r\n\r\n") == std::string::npos && head.size() < 8192) {
      asio::read(tls.next_layer(), asio::buffer(&c, 1), ec);
      if (ec) return fail("CONNECT answer");
      head.push_back(c);
    }
    if (head.rfind("HTTP/1.1 200", 0) != 0) return fail("the proxy refused the CONNECT");
    SSL_set_tlsext_host_name(tls.native_handle(), host.c_str());
    SSL_set1_host(tls.native_handle(), host.c_str());
    tls.handshake(asio::ssl::stream_base::client, ec);
    if (ec) return fail("TLS");
    std::string req = "POST " + path + " HTTP/1.1\r\nHost: " + host +
                      "\r\nContent-Type: application/json\r\nAccept: application/json\r\n"
                      "User-Agent: cloister-refresh-timer\r\nConnection: close\r\n"
                      "Content-Length: " + std::to_string(payload.size()) + "\r\n\r\n" + payload;
    asio::write(tls, asio::buffer(req), ec);
    if (ec) return fail("request");
    // SECURITY: the answer is the proxy's (placeholders only); only its status line is used.
    std::string resp;
    char buf[4096];
    while (resp.find("\r\n") == std::string::npos && resp.size() < kMaxTokenResponse) {
      size_t n = tls.read_some(asio::buffer(buf), ec);
      if (ec) break;
      resp.append(buf, n);
    }
    int status = 0;
    if (resp.rfind("HTTP/1.", 0) != 0 || resp.size() < 12 ||
        sscanf(resp.c_str() + 9, "%3d", &status) != 1) {
      return fail("no answer");
    }
    tls.shutdown(ec);
    return status;
  };
}

}  // namespace cloister::oauth
