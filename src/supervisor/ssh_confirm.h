// Per-signature confirmation of the workspace's SSH agent, on the user's terminal.
//
// The supervisor is a detached process with no terminal, so the question travels to a listener:
// `cloister ssh-confirm NAME` connects to the workspace's control socket (run/supervisor.sock,
// 0600 in a 0700 directory: only the workspace's owner) and sends {"op":"ssh-confirm"}. The
// supervisor hands that connection to SshConfirmBroker::ServeListener, which answers
//   {"ok":true,"workspace":NAME,"confirm":B,"fingerprint":"SHA256:..."}
// and from then on sends one line per signature the guest asks for
//   {"op":"confirm","id":N,"request":"SSH login as \"git\"","fingerprint":"SHA256:..."}
// to which the listener answers {"id":N,"allow":true|false}.
//
// The questions are served by the workspace's consent broker (supervisor/consent.h): an SSH
// signature is one kind of consent question ("kind":"ssh"), asked of every `cloister approve`
// listener as well as the newest ssh-confirm listener (this protocol, kept as it was).
//
// Fail closed: with no listener, when the listener says no, does not answer within the timeout,
// hangs up or answers garbage, the signature is refused (the guest's ssh sees SSH_AGENT_FAILURE,
// "agent refused operation") and the reason is logged (supervisor.log). The newest listener is
// asked; questions are asked one at a time.
//
// SECURITY: the request text comes from the guest (a user name or an SSHSIG namespace: checked
// printable ASCII by sshagent::ClassifySignData, truncated by SignRequestInfo::Describe); the
// listener still strips control characters before printing it. Listener replies are parsed with
// the bounded LineConn.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "sshagent/agent.h"
#include "supervisor/consent.h"
#include "supervisor/control.h"

namespace cloister::vm {

inline constexpr char kSshConfirmOp[] = "ssh-confirm";
inline constexpr std::chrono::seconds kSshConfirmTimeout{60};

class SshConfirmBroker {
 public:
  struct Options {
    std::string workspace;
    std::string fingerprint;  // of the workspace key, shown with each question
    bool enabled = false;     // the workspace's ssh policy asks for confirmation
    std::chrono::milliseconds timeout = kSshConfirmTimeout;
    std::function<void(const std::string&)> log;  // one line per refusal/decision
    // The consent broker that serves the questions (the supervisor shares its own, so
    // `cloister approve` sees SSH questions too). Null: a broker of its own (timeout, log above).
    std::shared_ptr<ConsentBroker> broker;
  };
  explicit SshConfirmBroker(Options options);
  ~SshConfirmBroker();

  // Re-read at each boot (the policy may have changed).
  void Configure(bool enabled, std::string fingerprint);

  // Serves one listener connection (already past its {"op":"ssh-confirm"} line) until the peer
  // hangs up or Stop() is called. Blocks; the caller owns `conn`.
  void ServeListener(LineConn& conn);

  // The agent's ConfirmFn: true only if a listener allowed this signature in time.
  bool Confirm(const sshagent::SignRequestInfo& info);

  // Hangs up every listener (they exit) and refuses every pending and later question.
  void Stop();

  // ssh-confirm listeners (not counting `cloister approve` ones).
  int listeners() const;

 private:
  void Log(const std::string& line) const;

  Options opts_;  // enabled and fingerprint guarded by mu_
  mutable std::mutex mu_;
  std::mutex ask_mu_;  // one question at a time
  std::shared_ptr<ConsentBroker> broker_;
};

}  // namespace cloister::vm
