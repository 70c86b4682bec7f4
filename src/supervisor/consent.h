// The consent broker of one running workspace (issue 19): pending questions, the user's
// decisions, and timed grants. It answers the proxy (proxy::ConsentGate: "may this request use
// credential X?") and the workspace's SSH agent (a signature with `ssh-policy --confirm on`), and
// it serves the people who decide: `cloister approve NAME` in a terminal and the dashboard
// (`cloister ui`), both over the workspace's control socket.
//
// ---------------------------------------------------------------------------------------------
// THE CONTROL-SOCKET PROTOCOL (the seam for `cloister approve` and the dashboard)
// ---------------------------------------------------------------------------------------------
// Socket: <workspace dir>/run/supervisor.sock (0600 in a 0700 directory: only the workspace's
// owner connects). JSON objects, one per line, each at most kMaxControlLine bytes (control.h).
//
// 1. A listener (long-lived connection; it is asked questions):
//      -> {"op":"consent-listen","client":"approve"}     client: a short name ("approve", "ui")
//      <- {"ok":true,"workspace":"dev","grants":["request","5m","1h","vm","deny"]}
//    then, for every question (also those already pending when it connected):
//      <- {"op":"consent","id":7,"kind":"cred","workspace":"dev","cred":"github",
//          "host":"api.github.com","method":"GET","path":"/user","ask":"once",
//          "grants":["request","5m","1h","vm","deny"],"timeout_s":60}
//      <- {"op":"consent","id":8,"kind":"ssh","workspace":"dev","cred":"ssh",
//          "request":"SSH login as \"git\"","fingerprint":"SHA256:...","host":"","method":"",
//          "path":"","ask":"always","grants":["request","deny"],"timeout_s":60}
//    the listener answers (any order; several questions may be open at once):
//      -> {"id":7,"grant":"request"|"5m"|"1h"|"vm"|"deny"}
//    and every listener is told when a question is closed (by anyone, or by the timeout), so a
//    dashboard removes its buttons:
//      <- {"op":"consent-done","id":7,"decision":"5m","by":"approve pid 4242","allowed":true}
//    Questions go to every consent listener; the first valid answer wins.
//    `grants` lists what this question accepts: an `always` credential and an SSH signature offer
//    only "request" and "deny" (a longer grant given to them counts as "request").
//    Garbage (a line that is not JSON, no numeric id, an unknown grant) refuses: the question it
//    names, or every question open on this connection when it names none. A listener that hangs
//    up stops being asked; a question nobody is left to answer is refused.
//
// 2. One-shot requests (answered, then the connection closes):
//      -> {"op":"consent-list"}
//      <- {"ok":true,"workspace":"dev","listeners":1,
//          "pending":[{"id":7,"kind":"cred","cred":"github","host":"api.github.com",
//                      "method":"GET","path":"/user","ask":"once","request":"","age_s":3,
//                      "expires_in_s":57,"grants":["request","5m","1h","vm","deny"]}],
//          "grants":[{"cred":"github","grant":"5m","by":"approve pid 4242","expires_in_s":297},
//                    {"cred":"openai","grant":"vm","by":"ui pid 99"}]}   (vm: no expires_in_s)
//      -> {"op":"consent-answer","id":7,"grant":"1h","client":"ui"}
//      <- {"ok":true,"decision":"1h"}   or {"ok":false,"error":"no pending question 7",...}
//      -> {"op":"consent-revoke","cred":"github"}        ("cred":"*" ends every grant)
//      <- {"ok":true,"revoked":1}
//    (a consent-answer needs the question to be pending: it is only asked while a listener is
//    connected, so the dashboard keeps a consent-listen connection open and may answer on it or
//    with consent-answer.)
//
// 3. The SSH-confirm alias (unchanged for `cloister ssh-confirm NAME`, ssh_confirm.h):
//      -> {"op":"ssh-confirm"}  <- {"ok":true,"workspace":..,"confirm":B,"fingerprint":..}
//      <- {"op":"confirm","id":N,"workspace":..,"request":..,"fingerprint":..}
//      -> {"id":N,"allow":true|false}
//    Only SSH questions reach such a listener, and only the newest one is asked.
// ---------------------------------------------------------------------------------------------
//
// Decisions: "request" allows this one request; "5m" and "1h" allow this and every later use of
// the credential for that long; "vm" until the VM stops (the grant ends at the next boot or when
// the supervisor exits); "deny" refuses this request (the next use asks again). A credential with
// `--ask always` asks on every use (grants never apply to it); `--ask once` asks on the first use
// and the grant length decides after that. Grants are per workspace and credential, live in this
// object only (never on disk), and end early with `cloister cred revoke NAME CRED`.
//
// Fail closed: no listener, no answer within the timeout, a listener that hangs up, garbage, or a
// stopping broker: refused, and the reason is in the answer (the proxy's 403 body and trace).
//
// Time: grant expiry and question timeouts read Options::now (steady_clock::now by default;
// tests inject a clock they move, then call ExpireDue). The proxy's wait costs no wakeups: a
// ticket's wake (ConsentTicket::OnDecided) is called when the question is decided, and its
// TimeLeft says when the timeout is due; Poll decides the timeout. AskAndWait polls (50 ms).
//
// Threading: every public method is thread safe. ServeListener blocks (one thread per listener
// connection, the supervisor's connection thread); AskAndWait blocks (the SSH agent's thread);
// Ask and Poll never block (the proxy's event loop).
//
// SECURITY: question text comes from the guest (host, method, path from the request; the SSH
// request text from sshagent::SignRequestInfo::Describe). It is bounded here (kMaxQuestionField)
// and listeners strip control characters before showing it. Listener lines are parsed with the
// bounded LineConn; anything but a valid answer refuses.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/result.h"
#include "proxy/consent_filter.h"
#include "supervisor/control.h"

namespace cloister::vm {

inline constexpr char kConsentListenOp[] = "consent-listen";
inline constexpr char kConsentListOp[] = "consent-list";
inline constexpr char kConsentAnswerOp[] = "consent-answer";
inline constexpr char kConsentRevokeOp[] = "consent-revoke";
inline constexpr std::chrono::seconds kConsentTimeout{60};
inline constexpr size_t kMaxQuestionField = 512;

// A person's decision.
enum class Grant { kRequest, kFiveMinutes, kOneHour, kUntilVmStops, kDeny };
const char* GrantName(Grant g);  // "request", "5m", "1h", "vm", "deny"
std::optional<Grant> ParseGrant(std::string_view name);

// Create with std::make_shared: the proxy's tickets hold a weak reference to it.
class ConsentBroker : public proxy::ConsentGate,
                      public std::enable_shared_from_this<ConsentBroker> {
 public:
  using Clock = std::chrono::steady_clock;
  struct Options {
    std::string workspace;
    std::chrono::milliseconds timeout = kConsentTimeout;  // per question
    std::function<Clock::time_point()> now;               // default: Clock::now
    std::function<void(const std::string&)> log;          // one line per decision (supervisor.log)
  };
  explicit ConsentBroker(Options options);
  ~ConsentBroker() override;

  // The proxy's question (proxy::ConsentGate). A live grant (policy once) answers at once, as
  // does the absence of any listener (refused).
  std::shared_ptr<proxy::ConsentTicket> Ask(const proxy::ConsentQuestion& question) override;

  // An SSH signature's question (kind "ssh"); blocks until decided. Every consent listener and
  // the newest ssh-confirm listener are asked.
  struct SshQuestion {
    std::string request;      // SignRequestInfo::Describe()
    std::string fingerprint;  // of the workspace key
  };
  proxy::ConsentAnswer AskAndWait(const SshQuestion& question);

  // How a listener connection speaks (see the protocol above).
  struct ListenerOptions {
    enum class Protocol { kConsent, kSshConfirm } protocol = Protocol::kConsent;
    std::string client = "approve";  // shown in `by`
    nlohmann::json hello;            // kSshConfirm: the hello line to send (under the lock)
  };
  // Serves one listener connection (past its first line) until the peer hangs up or Stop().
  // Blocks; the caller owns `conn`.
  void ServeListener(LineConn& conn, const ListenerOptions& options);

  // The one-shot ops (protocol section 2). Each returns the reply line.
  nlohmann::json List();
  nlohmann::json Answer(uint64_t id, Grant grant, const std::string& client, int peer_pid);
  nlohmann::json Revoke(const std::string& credential);  // "*": all
  // Dispatches one of the ops above from its request line (consent-list/answer/revoke).
  nlohmann::json HandleRequest(const nlohmann::json& request, int peer_pid);

  // Refuses every pending question whose timeout passed by Options::now, waking its waiter
  // (a waiting proxy sleeps until TimeLeft by the real clock: call this after moving an injected
  // clock).
  void ExpireDue();
  // Ends every "until the VM stops" grant (the supervisor calls it at each boot).
  void EndVmGrants();
  // Hangs up every listener and refuses every pending and later question. Idempotent.
  void Stop();

  int listeners() const;
  int ssh_listeners() const;

 private:
  struct Pending;
  struct Listener;
  class Ticket;
  friend class Ticket;

  Clock::time_point Now() const;
  void Log(const std::string& line) const;
  // Under mu_: the pending question with `id`, resolved now if its time is up.
  std::optional<proxy::ConsentAnswer> PollLocked(uint64_t id);
  void ResolveLocked(const std::shared_ptr<Pending>& p, proxy::ConsentAnswer answer);
  // Refuses `p` if its timeout passed ("no answer within N s").
  void ExpireLocked(const std::shared_ptr<Pending>& p);
  void ApplyLocked(const std::shared_ptr<Pending>& p, Grant grant, const std::string& by);
  std::optional<proxy::ConsentAnswer> GrantCoversLocked(const std::string& credential);
  bool SendQuestionLocked(Listener& l, const Pending& p);
  std::shared_ptr<Pending> OpenLocked(std::shared_ptr<Pending> p);
  void WithdrawLocked(uint64_t id);
  void ListenerGoneLocked(const std::shared_ptr<Listener>& who);

  struct GrantRecord {
    Grant grant;
    std::string by;
    std::optional<Clock::time_point> expires;  // nullopt: until the VM stops
  };

  Options opts_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<uint64_t, std::shared_ptr<Pending>> pending_;  // guarded by mu_
  std::list<std::shared_ptr<Listener>> listeners_;        // newest last; guarded by mu_
  std::map<std::string, GrantRecord> grants_;             // by credential id; guarded by mu_
  uint64_t next_id_ = 1;                                  // guarded by mu_
  bool stopped_ = false;                                  // guarded by mu_
};

}  // namespace cloister::vm
