#include "supervisor/ssh_confirm.h"

namespace cloister::vm {

using nlohmann::json;

SshConfirmBroker::SshConfirmBroker(Options options) : opts_(std::move(options)) {
  broker_ = opts_.broker;
  if (!broker_) {
    ConsentBroker::Options o;
    o.workspace = opts_.workspace;
    o.timeout = opts_.timeout;
    o.log = opts_.log;
    broker_ = std::make_shared<ConsentBroker>(o);
  }
}

SshConfirmBroker::~SshConfirmBroker() {
  if (!opts_.broker) Stop();  // a shared broker is stopped by its owner
}

void SshConfirmBroker::Configure(bool enabled, std::string fingerprint) {
  std::lock_guard<std::mutex> l(mu_);
  opts_.enabled = enabled;
  opts_.fingerprint = std::move(fingerprint);
}

void SshConfirmBroker::Log(const std::string& line) const {
  if (opts_.log) opts_.log(line);
}

int SshConfirmBroker::listeners() const { return broker_->ssh_listeners(); }

void SshConfirmBroker::ServeListener(LineConn& conn) {
  ConsentBroker::ListenerOptions lo;
  lo.protocol = ConsentBroker::ListenerOptions::Protocol::kSshConfirm;
  lo.client = "ssh-confirm";
  {
    std::lock_guard<std::mutex> l(mu_);
    lo.hello = {{"ok", true},
                {"workspace", opts_.workspace},
                {"confirm", opts_.enabled},
                {"fingerprint", opts_.fingerprint}};
  }
  broker_->ServeListener(conn, lo);
}

bool SshConfirmBroker::Confirm(const sshagent::SignRequestInfo& info) {
  std::lock_guard<std::mutex> ask(ask_mu_);
  const std::string what = info.Describe();
  std::string fingerprint;
  {
    std::lock_guard<std::mutex> l(mu_);
    fingerprint = opts_.fingerprint;
  }
  proxy::ConsentAnswer a = broker_->AskAndWait({what, fingerprint});
  if (a.allowed) {
    Log("ssh: signature allowed by the user (" + what + ")");
    return true;
  }
  if (a.decision == "deny") {
    Log("ssh: signature refused by the user (" + what + ")");
  } else if (a.by == "no listener") {
    Log("ssh: signature refused (" + what + "): confirmation is on and nobody is listening; run "
        "`cloister ssh-confirm " + opts_.workspace + "` (or `cloister approve " + opts_.workspace +
        "`) on the host to be asked");
  } else if (a.by == "stopping") {
    Log("ssh: signature refused (" + what + "): the workspace is stopping");
  } else if (a.by == "the listener left") {
    Log("ssh: signature refused (" + what + "): the listener left before answering");
  } else {
    Log("ssh: signature refused (" + what + "): " + a.by);
  }
  return false;
}

void SshConfirmBroker::Stop() { broker_->Stop(); }

}  // namespace cloister::vm
