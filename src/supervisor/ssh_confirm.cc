#include "supervisor/ssh_confirm.h"

#include <sys/socket.h>

namespace cloister::vm {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

SshConfirmBroker::SshConfirmBroker(Options options) : opts_(std::move(options)) {}

SshConfirmBroker::~SshConfirmBroker() { Stop(); }

void SshConfirmBroker::Configure(bool enabled, std::string fingerprint) {
  std::lock_guard<std::mutex> l(mu_);
  opts_.enabled = enabled;
  opts_.fingerprint = std::move(fingerprint);
}

void SshConfirmBroker::Log(const std::string& line) const {
  if (opts_.log) opts_.log(line);
}

int SshConfirmBroker::listeners() const {
  std::lock_guard<std::mutex> l(mu_);
  return static_cast<int>(listeners_.size());
}

void SshConfirmBroker::ServeListener(LineConn& conn) {
  auto me = std::make_shared<Listener>();
  me->conn = &conn;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (stopped_) {
      (void)conn.Send(ErrorReply(Error(ErrorCode::kUnavailable, "the workspace is stopping")));
      return;
    }
    // The hello is sent under the lock, before any question can be (questions need the lock).
    Status hello = conn.Send({{"ok", true},
                              {"workspace", opts_.workspace},
                              {"confirm", opts_.enabled},
                              {"fingerprint", opts_.fingerprint}});
    if (!hello.ok()) return;
    listeners_.push_back(me);
  }
  Log("ssh-confirm: a listener connected");
  while (true) {
    // SECURITY: bounded line parser; anything but {"id":N,"allow":B} refuses the question.
    Result<json> msg = conn.Read(Clock::now() + std::chrono::hours(24));
    if (!msg.ok()) {
      if (msg.error().message().find("no answer in time") != std::string::npos) continue;
      break;  // hung up, or Stop() shut the socket down
    }
    std::lock_guard<std::mutex> l(mu_);
    auto id = msg->find("id");
    auto allow = msg->find("allow");
    bool well_formed = id != msg->end() && id->is_number_unsigned() && allow != msg->end() &&
                       allow->is_boolean();
    if (me->waiting_id == 0) continue;  // a late answer to a question that timed out
    if (!well_formed) {
      me->answer = false;
    } else if (id->get<uint64_t>() == me->waiting_id) {
      me->answer = allow->get<bool>();
    } else {
      continue;  // an answer to an older question
    }
    cv_.notify_all();
  }
  {
    std::lock_guard<std::mutex> l(mu_);
    me->gone = true;
    me->conn = nullptr;
    listeners_.remove(me);
  }
  cv_.notify_all();
  Log("ssh-confirm: a listener left");
}

bool SshConfirmBroker::Confirm(const sshagent::SignRequestInfo& info) {
  std::lock_guard<std::mutex> ask(ask_mu_);
  const std::string what = info.Describe();
  std::unique_lock<std::mutex> l(mu_);
  if (stopped_) {
    Log("ssh: signature refused (" + what + "): the workspace is stopping");
    return false;
  }
  if (listeners_.empty()) {
    Log("ssh: signature refused (" + what + "): confirmation is on and nobody is listening; run "
        "`cloister ssh-confirm " + opts_.workspace + "` on the host to be asked");
    return false;
  }
  std::shared_ptr<Listener> who = listeners_.back();
  uint64_t id = next_id_++;
  who->waiting_id = id;
  who->answer.reset();
  // Sent under mu_ so the listener's connection cannot go away meanwhile; one question is in
  // flight per listener, so the send never waits for the peer.
  Status sent = who->conn->Send({{"op", "confirm"},
                                 {"id", id},
                                 {"workspace", opts_.workspace},
                                 {"request", what},
                                 {"fingerprint", opts_.fingerprint}});
  if (!sent.ok()) {
    who->waiting_id = 0;
    Log("ssh: signature refused (" + what + "): the listener could not be asked: " +
        sent.error().message());
    return false;
  }
  bool in_time = cv_.wait_for(l, opts_.timeout, [&] { return who->answer || who->gone || stopped_; });
  who->waiting_id = 0;
  if (who->answer) {
    bool ok = *who->answer;
    who->answer.reset();
    Log(std::string("ssh: signature ") + (ok ? "allowed" : "refused") + " by the user (" + what + ")");
    return ok;
  }
  if (!in_time) {
    Log("ssh: signature refused (" + what + "): no answer within " +
        std::to_string(std::chrono::duration_cast<std::chrono::seconds>(opts_.timeout).count()) + " s");
  } else {
    Log("ssh: signature refused (" + what + "): the listener left before answering");
  }
  return false;
}

void SshConfirmBroker::Stop() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stopped_ = true;
    for (const auto& who : listeners_) {
      if (who->conn) shutdown(who->conn->fd(), SHUT_RDWR);
    }
  }
  cv_.notify_all();
}

}  // namespace cloister::vm
