// Ask-before-use consent for credentials (issue 19): a credential whose policy is `ask`
// (`cloister cred policy NAME CRED --ask once|always`, vault::Credential::ask) is swapped into a
// request only after a person on the host said yes.
//
// The proxy does not know who decides: it asks a ConsentGate (ProxyConfig::consent), which the
// supervisor implements (supervisor/consent.h: the broker, its listeners `cloister approve` and the
// dashboard, and the timed grants). The filter sits in the chain after the name agreement and
// before any substitution (chain.cc), so the real value of an ask-credential is never put into the
// request before the grant. What counts as a use is credential_use.h's WouldSwap, the decision the
// swapping filters swap by (every kind: headers, bodies, AWS re-signing, OAuth logins); each swap
// checks the decision again (CheckConsented).
//
// Waiting: filters never block. When a question is undecided the filter leaves a ticket in the
// exchange (Exchange::consent_wait); the chain stops there (Chain::OnRequestHead), the HTTP driver
// waits on an asio timer that the ticket's wake (ConsentTicket::OnDecided) cancels, or that runs
// out when the gate's timeout is due (ConsentTicket::TimeLeft), so an open question costs no
// wakeups (the event loop serves other connections meanwhile); then it calls the chain again
// from this filter, which reads the answer.
//
// Fail closed: no gate configured, no listener, no answer in time, a closed listener or garbage:
// the request is refused with 403 and a body naming the credential and `cloister approve NAME`;
// nothing of it goes upstream. Each decision lands in the request's trace record (trace.h
// ConsentRecord: who, what, grant length).
//
// SECURITY: the question carries guest-chosen text (host, method, path); the broker and every
// listener treat it as hostile (bounded, control characters stripped before display).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include <boost/asio/awaitable.hpp>

#include "proxy/chain.h"
#include "vault/credential.h"

namespace cloister::proxy {

// One use of an ask-credential, as the proxy sees it.
struct ConsentQuestion {
  std::string credential;  // credential id ("github", "header:x-api-key")
  std::string host;        // destination host
  std::string method;
  std::string path;        // without the query string (TracePath)
  vault::ConsentAsk ask = vault::ConsentAsk::kOnce;
};

// The decision about one question.
struct ConsentAnswer {
  bool allowed = false;
  // "request", "5m", "1h", "vm" (a person's yes and its grant length), "grant" (an earlier grant
  // covered this use), "deny" (a person's no) or "refused" (nobody decided: see `by`).
  std::string decision;
  // Who decided: "approve pid 1234", "ui pid 99", or for "refused" why: "no listener",
  // "no answer within 60 s", "the listener left", "garbage answer", "stopping".
  std::string by;
  int64_t grant_s = 0;  // seconds the grant lasts from now (-1: until the VM stops; 0: none)
  bool asked = false;   // the question was put to a listener (false: a grant, or nobody to ask)
};

// A pending question. Thread safe; Poll never blocks. Dropping an undecided ticket withdraws the
// question (the guest went away).
class ConsentTicket {
 public:
  virtual ~ConsentTicket() = default;
  // The answer once decided (the same one on every later call), nullopt while undecided.
  // Implementations decide timeouts here too, so polling alone ends every wait.
  virtual std::optional<ConsentAnswer> Poll() = 0;
  // Asks for `wake` to be called once, from any thread (it must only hand off, e.g. asio::post),
  // when the ticket is decided: at once (on this thread) if it already is. A later call replaces
  // an earlier wake; once the ticket is destroyed its wake is never called. The default never
  // wakes: the waiter then relies on TimeLeft alone.
  virtual void OnDecided(std::function<void()> wake) { (void)wake; }
  // How long the waiter may sleep before it must Poll again: until the gate would decide a
  // timeout by itself. The default, 25 ms, is polling (a ticket that never wakes).
  virtual std::chrono::milliseconds TimeLeft() { return std::chrono::milliseconds(25); }
};

// Implemented by the supervisor's broker (supervisor/consent.h). Thread safe.
class ConsentGate {
 public:
  virtual ~ConsentGate() = default;
  // May return an already decided ticket (a live grant; no listener). Never null.
  virtual std::shared_ptr<ConsentTicket> Ask(const ConsentQuestion& question) = 0;
};

// The HTTP driver's wait for `ticket` (run on the exchange's event loop, one thread): an asio
// timer set to the ticket's TimeLeft (at most until `cap`) that the ticket's wake cancels, so
// nothing runs until the decision or the timeout is due. Returns false when the timer was
// cancelled by anything but the wake (the proxy is stopping); the caller then Polls again.
boost::asio::awaitable<bool> AwaitDecision(ConsentTicket& ticket,
                                           std::chrono::steady_clock::time_point cap);

class ConsentFilter : public Filter {
 public:
  const char* name() const override { return "consent"; }
  Status OnRequestHead(Exchange& ex) override;
};


}  // namespace cloister::proxy
