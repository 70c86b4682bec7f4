// `cloister cred policy NAME CRED --ask`, `cred revoke` and `cloister approve` against a consent
// broker served on the workspace's control socket (as the supervisor serves it), no VM: the policy
// round trip through the vault, the terminal's answers becoming grants, revoke ending one, and the
// refusals when the workspace is not running.
#include <sys/socket.h>
#include <sys/stat.h>

#include <filesystem>
#include <future>
#include <thread>

#include <gtest/gtest.h>

#include "cli/testing.h"
#include "supervisor/consent.h"
#include "supervisor/control.h"

namespace cloister::cli {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using testing::Outcome;

class ApproveCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    setenv("CLOISTER_VAULT_KEY_BACKEND", "file", 1);
    ASSERT_EQ(store_.CreateWorkspace("dev"), "");
    ASSERT_EQ(store_.Run({"cred", "add", "dev", "github"}, "ghp_REALGITHUBSECRET0123456789abcdefgh\n").code, 0);
  }
  void TearDown() override {
    if (broker_) broker_->Stop();
    if (listen_fd_ >= 0) shutdown(listen_fd_, SHUT_RDWR);
    if (acceptor_.joinable()) acceptor_.join();
    for (auto& t : conns_) t.join();
    if (listen_fd_ >= 0) close(listen_fd_);
  }
  // The supervisor's end of the control socket: the consent ops go to a broker.
  void ServeBroker() {
    vm::ConsentBroker::Options o;
    o.workspace = "dev";
    broker_ = std::make_shared<vm::ConsentBroker>(o);
    std::string run = store_.root() + "/workspaces/dev/run";
    fs::create_directories(run);
    chmod(run.c_str(), 0700);
    auto fd = vm::ListenUnix(run + "/supervisor.sock");
    ASSERT_TRUE(fd.ok()) << fd.error().ToString();
    listen_fd_ = *fd;
    acceptor_ = std::thread([this] {
      while (true) {
        int c = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
        if (c < 0) return;
        conns_.emplace_back([this, c] {
          vm::LineConn conn(c);
          auto req = conn.Read(Clock::now() + std::chrono::seconds(10));
          if (!req.ok()) return;
          if (vm::JsonString(*req, "op") == vm::kConsentListenOp) {
            broker_->ServeListener(conn, {vm::ConsentBroker::ListenerOptions::Protocol::kConsent,
                                          vm::JsonString(*req, "client"), {}});
          } else {
            (void)conn.Send(broker_->HandleRequest(*req, 1));
          }
        });
      }
    });
  }
  Outcome Run(const std::vector<std::string>& args, const std::string& in = "") {
    return store_.Run(args, in);
  }
  static proxy::ConsentAnswer Wait(proxy::ConsentTicket& t) {
    auto deadline = Clock::now() + std::chrono::seconds(30);
    while (!t.Poll() && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    auto a = t.Poll();
    EXPECT_TRUE(a.has_value());
    return a ? *a : proxy::ConsentAnswer{};
  }
  // An Ask once a listener is there (approve registers asynchronously).
  std::shared_ptr<proxy::ConsentTicket> AskWhenListening() {
    auto deadline = Clock::now() + std::chrono::seconds(30);
    while (broker_->listeners() == 0 && Clock::now() < deadline) std::this_thread::yield();
    EXPECT_EQ(broker_->listeners(), 1);
    return broker_->Ask({"github", "api.github.com", "GET", "/user", vault::ConsentAsk::kOnce});
  }

  testing::TempStore store_{"appr"};
  std::shared_ptr<vm::ConsentBroker> broker_;
  int listen_fd_ = -1;
  std::thread acceptor_;
  std::vector<std::thread> conns_;
};

TEST_F(ApproveCliTest, AskPolicyIsStoredPerCredentialAndSurvivesAReAdd) {
  Outcome set = Run({"cred", "policy", "dev", "github", "--ask", "once"});
  ASSERT_EQ(set.code, 0) << set.err;
  EXPECT_NE(set.out.find("github ask: once"), std::string::npos) << set.out;
  EXPECT_NE(set.err.find("wait for `cloister approve dev`"), std::string::npos) << set.err;
  Outcome ls = Run({"cred", "ls", "dev", "--json"});
  ASSERT_EQ(ls.code, 0) << ls.err;
  EXPECT_EQ(ls.json()["credentials"][0]["ask"], "once") << ls.out;
  // A new value for the same credential keeps the policy (rotation must not turn consent off).
  Outcome re = Run({"cred", "add", "dev", "github"}, "ghp_OTHERGITHUBSECRET0123456789abcdefgh\n");
  ASSERT_EQ(re.code, 0) << re.err;
  EXPECT_NE(re.out.find("asks before use (once)"), std::string::npos) << re.out;
  EXPECT_EQ(Run({"cred", "ls", "dev", "--json"}).json()["credentials"][0]["ask"], "once");
  EXPECT_NE(Run({"cred", "policy", "dev"}).out.find("github ask: once"), std::string::npos);
  ASSERT_EQ(Run({"cred", "policy", "dev", "github", "--ask", "off"}).code, 0);
  EXPECT_EQ(Run({"cred", "ls", "dev", "--json"}).json()["credentials"][0]["ask"], "off");
}

TEST_F(ApproveCliTest, PolicyErrorsCarryTheirFix) {
  Outcome bad = Run({"cred", "policy", "dev", "github", "--ask", "sometimes"});
  EXPECT_NE(bad.code, 0);
  EXPECT_NE(bad.err.find("--ask must be once, always or off"), std::string::npos) << bad.err;
  Outcome nocred = Run({"cred", "policy", "dev", "--ask", "once"});
  EXPECT_NE(nocred.code, 0);
  EXPECT_NE(nocred.err.find("--ask needs the credential"), std::string::npos) << nocred.err;
  Outcome missing = Run({"cred", "policy", "dev", "openai", "--ask", "once"});
  EXPECT_NE(missing.code, 0);
  EXPECT_NE(missing.err.find("no credential openai in workspace dev"), std::string::npos) << missing.err;
  EXPECT_NE(missing.err.find("cloister cred ls dev"), std::string::npos) << missing.err;
}

TEST_F(ApproveCliTest, NotRunningMeansNothingToApproveAndNoGrants) {
  Outcome a = Run({"approve", "dev"});
  EXPECT_NE(a.code, 0);
  EXPECT_NE(a.err.find("dev is not running: nothing asks for consent"), std::string::npos) << a.err;
  EXPECT_NE(a.err.find("cloister start dev"), std::string::npos) << a.err;
  Outcome r = Run({"cred", "revoke", "dev", "github"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("dev is not running: it holds no grants"), std::string::npos) << r.out;
}

TEST_F(ApproveCliTest, TheTerminalsAnswerIsAGrantThatRevokeEnds) {
  ServeBroker();
  // The user types "5" (5 minutes) to the first question, then stdin ends.
  auto approve = std::async(std::launch::async, [&] { return Run({"approve", "dev"}, "5\n"); });
  auto t = AskWhenListening();
  proxy::ConsentAnswer a = Wait(*t);
  EXPECT_TRUE(a.allowed);
  EXPECT_EQ(a.decision, "5m");
  EXPECT_EQ(a.by.rfind("approve", 0), 0u) << a.by;
  // The grant covers the next use with no question.
  auto again = broker_->Ask({"github", "api.github.com", "GET", "/", vault::ConsentAsk::kOnce});
  ASSERT_TRUE(again->Poll().has_value());
  EXPECT_EQ(again->Poll()->decision, "grant");
  Outcome list = Run({"approve", "dev", "--list", "--json"});
  ASSERT_EQ(list.code, 0) << list.err;
  EXPECT_EQ(list.json()["workspaces"][0]["grants"][0]["cred"], "github") << list.out;
  Outcome text = Run({"approve", "--list"});
  EXPECT_NE(text.out.find("dev\tgranted\tgithub\t5m\t"), std::string::npos) << text.out;
  // Revoke ends it: the next use asks (and, stdin having ended, approve denies and exits).
  Outcome rev = Run({"cred", "revoke", "dev", "github"});
  ASSERT_EQ(rev.code, 0) << rev.err;
  EXPECT_NE(rev.out.find("Revoked 1 grant of github in dev"), std::string::npos) << rev.out;
  auto after = broker_->Ask({"github", "api.github.com", "GET", "/", vault::ConsentAsk::kOnce});
  proxy::ConsentAnswer denied = Wait(*after);
  EXPECT_FALSE(denied.allowed);
  Outcome o = approve.get();
  EXPECT_NE(o.code, 0);
  EXPECT_NE(o.err.find("dev asks to use github for GET api.github.com/user. Allow? [r] this "
                       "request, [5] 5 minutes"), std::string::npos) << o.err;
  EXPECT_NE(o.err.find("allowed for 5m"), std::string::npos) << o.err;
  EXPECT_NE(o.err.find("stdin ended"), std::string::npos) << o.err;
}

}  // namespace
}  // namespace cloister::cli
