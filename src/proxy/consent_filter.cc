#include "proxy/consent_filter.h"

#include <algorithm>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "proxy/credential_use.h"
#include "proxy/exchange.h"
#include "proxy/proxy.h"

namespace cloister::proxy {

namespace {

std::string RefusalText(const Exchange& ex, const std::string& cred, const ConsentAnswer& a) {
  const std::string& ws = ex.ctx.config->workspace;
  std::string why = a.decision == "deny" ? "denied by " + a.by : "refused: " + a.by;
  return "credential " + cred + " needs the user's consent (" + why +
         "); run `cloister approve " + ws + "` on the host to be asked, or `cloister cred policy " +
         ws + " " + cred + " --ask off` to stop asking";
}

}  // namespace

boost::asio::awaitable<bool> AwaitDecision(ConsentTicket& ticket,
                                           std::chrono::steady_clock::time_point cap) {
  namespace asio = boost::asio;
  auto exec = co_await asio::this_coro::executor;
  // Shared with the wake's posted handler, which may run after this wait ended.
  struct Wait {
    explicit Wait(const asio::any_io_executor& e) : timer(e) {}
    asio::steady_timer timer;
    bool woken = false;
  };
  auto w = std::make_shared<Wait>(exec);
  std::chrono::steady_clock::duration left = ticket.TimeLeft();
  left = std::max(std::chrono::steady_clock::duration::zero(),
                  std::min(left, cap - std::chrono::steady_clock::now()));
  w->timer.expires_after(left);
  // The wake comes from the gate's thread: it only posts to this loop, so the cancel runs here
  // after this coroutine is suspended in async_wait (a wake during OnDecided is posted too, and
  // cannot be lost).
  ticket.OnDecided([w, exec] {
    asio::post(exec, [w] {
      w->woken = true;
      w->timer.cancel();
    });
  });
  auto [ec] = co_await w->timer.async_wait(asio::as_tuple(asio::use_awaitable));
  ticket.OnDecided(nullptr);  // this wait is over: no post into a loop that may be gone
  co_return !ec || w->woken;
}

Status ConsentFilter::OnRequestHead(Exchange& ex) {
  // Only a TLS-intercepted request whose names agree ever gets a real value (the substitution
  // filters check the same), so only such a request needs a decision.
  if (!ex.origin.tls || !ex.names_agree) return OkStatus();
  const auto& creds = ex.ctx.config->credentials;
  // Resumed after a wait: read the decision about the credential we were waiting for.
  if (ex.consent_wait) {
    std::optional<ConsentAnswer> a = ex.consent_wait->Poll();
    if (!a) return OkStatus();  // not yet (the driver only resumes once decided)
    const std::string cred = creds[ex.consent_waiting_for].credential.id;
    ex.consent_wait.reset();
    ex.consent_decided.push_back(ex.consent_waiting_for);
    ex.rec.consent.push_back({cred, a->decision, a->by, a->grant_s, a->asked});
    if (!a->allowed) return ex.Refuse(403, RefusalText(ex, cred, *a));
  }
  for (size_t i : ex.in_scope) {
    const vault::Credential& c = creds[i].credential;
    if (c.ask == vault::ConsentAsk::kOff) continue;
    if (std::find(ex.consent_decided.begin(), ex.consent_decided.end(), i) !=
        ex.consent_decided.end()) {
      continue;
    }
    // The one decision the swapping filters swap by (credential_use.h): every kind, every way.
    if (!WouldSwap(ex, i).any()) continue;
    if (!ex.ctx.config->consent) {
      // SECURITY: fail closed: an ask policy with nobody to ask is a refusal, never a swap.
      ConsentAnswer none{false, "refused", "no consent broker in this proxy", 0, false};
      ex.rec.consent.push_back({c.id, none.decision, none.by, 0, false});
      return ex.Refuse(403, RefusalText(ex, c.id, none));
    }
    ConsentQuestion q{c.id, ex.target.host, ex.rec.method, ex.rec.path, c.ask};
    std::shared_ptr<ConsentTicket> t = ex.ctx.config->consent->Ask(q);
    std::optional<ConsentAnswer> a = t ? t->Poll() : ConsentAnswer{false, "refused", "no ticket", 0};
    if (!a) {
      ex.consent_wait = std::move(t);  // the chain stops here; the driver waits and resumes
      ex.consent_waiting_for = i;
      return OkStatus();
    }
    ex.consent_decided.push_back(i);
    // Decided at once: usually a grant (decision "grant") or nobody to ask; a listener that
    // answered before this first poll says so in `asked`.
    ex.rec.consent.push_back({c.id, a->decision, a->by, a->grant_s, a->asked});
    if (!a->allowed) return ex.Refuse(403, RefusalText(ex, c.id, *a));
  }
  return OkStatus();
}

}  // namespace cloister::proxy
