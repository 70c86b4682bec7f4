// SshConfirmBroker against a listener on a socketpair: allow, deny, nobody listening, silence,
// hang-up, garbage, stop. And through a real SignOnlyAgent: a refused question is a refused
// signature.
#include "supervisor/ssh_confirm.h"

#include <sys/socket.h>
#include <unistd.h>

#include <future>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "sshagent/wire.h"

namespace cloister::vm {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

class SshConfirmTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SshConfirmBroker::Options o;
    o.workspace = "dev";
    o.fingerprint = "SHA256:test";
    o.enabled = true;
    o.timeout = std::chrono::milliseconds(1500);
    o.log = [this](const std::string& line) {
      std::lock_guard<std::mutex> l(log_mu_);
      log_.push_back(line);
    };
    broker_ = std::make_unique<SshConfirmBroker>(o);
  }
  void TearDown() override {
    broker_->Stop();
    for (auto& t : threads_) t.join();
  }

  // Connects a listener; returns the test's end (past the hello, which it checks).
  std::unique_ptr<LineConn> Listen() {
    int sv[2];
    EXPECT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    int before = broker_->listeners();
    threads_.emplace_back([this, fd = sv[0]] {
      LineConn conn(fd);
      broker_->ServeListener(conn);
    });
    auto mine = std::make_unique<LineConn>(sv[1]);
    auto hello = mine->Read(Clock::now() + std::chrono::seconds(10));
    EXPECT_TRUE(hello.ok());
    if (hello.ok()) {
      EXPECT_EQ((*hello)["ok"], true);
      EXPECT_EQ((*hello)["confirm"], true);
      EXPECT_EQ((*hello)["fingerprint"], "SHA256:test");
    }
    // The hello is sent before the broker registers the listener: wait for it (bounded).
    auto deadline = Clock::now() + std::chrono::seconds(10);
    while (broker_->listeners() == before && Clock::now() < deadline) std::this_thread::yield();
    EXPECT_EQ(broker_->listeners(), before + 1);
    return mine;
  }

  static sshagent::SignRequestInfo Login(const std::string& user) {
    sshagent::SignRequestInfo i;
    i.kind = sshagent::SignRequestInfo::Kind::kUserAuth;
    i.user = user;
    return i;
  }

  std::string LogText() {
    std::lock_guard<std::mutex> l(log_mu_);
    std::string s;
    for (auto& line : log_) s += line + "\n";
    return s;
  }

  std::unique_ptr<SshConfirmBroker> broker_;
  std::vector<std::thread> threads_;
  std::mutex log_mu_;
  std::vector<std::string> log_;
};

TEST_F(SshConfirmTest, NobodyListeningRefusesWithAHintInTheLog) {
  EXPECT_FALSE(broker_->Confirm(Login("git")));
  EXPECT_NE(LogText().find("nobody is listening; run `cloister ssh-confirm dev`"), std::string::npos)
      << LogText();
}

TEST_F(SshConfirmTest, TheListenerAllowsAndDenies) {
  auto conn = Listen();
  for (bool answer : {true, false, true}) {
    auto asked = std::async(std::launch::async, [&] { return broker_->Confirm(Login("git")); });
    auto q = conn->Read(Clock::now() + std::chrono::seconds(10));
    ASSERT_TRUE(q.ok()) << q.error().ToString();
    EXPECT_EQ((*q)["op"], "confirm");
    EXPECT_EQ((*q)["request"], "SSH login as \"git\"");
    EXPECT_EQ((*q)["fingerprint"], "SHA256:test");
    ASSERT_TRUE(conn->Send({{"id", (*q)["id"]}, {"allow", answer}}).ok());
    EXPECT_EQ(asked.get(), answer);
  }
  EXPECT_NE(LogText().find("allowed by the user"), std::string::npos);
  EXPECT_NE(LogText().find("refused by the user"), std::string::npos);
}

TEST_F(SshConfirmTest, SilenceHangUpAndGarbageRefuse) {
  auto conn = Listen();
  // No answer in time.
  EXPECT_FALSE(broker_->Confirm(Login("git")));
  EXPECT_NE(LogText().find("no answer within"), std::string::npos);
  auto stale = conn->Read(Clock::now() + std::chrono::seconds(10));
  ASSERT_TRUE(stale.ok());
  // A late "yes" to that question does not carry over to the next one.
  ASSERT_TRUE(conn->Send({{"id", (*stale)["id"]}, {"allow", true}}).ok());
  {
    auto asked = std::async(std::launch::async, [&] { return broker_->Confirm(Login("git")); });
    auto q = conn->Read(Clock::now() + std::chrono::seconds(10));
    ASSERT_TRUE(q.ok());
    EXPECT_NE((*q)["id"], (*stale)["id"]);
    ASSERT_TRUE(conn->Send({{"id", (*q)["id"]}, {"allow", "yes"}}).ok());  // garbage
    EXPECT_FALSE(asked.get());
  }
  // Hang up while a question is pending.
  auto asked = std::async(std::launch::async, [&] { return broker_->Confirm(Login("git")); });
  auto q = conn->Read(Clock::now() + std::chrono::seconds(10));
  ASSERT_TRUE(q.ok());
  conn.reset();
  EXPECT_FALSE(asked.get());
  EXPECT_NE(LogText().find("left before answering"), std::string::npos) << LogText();
  // And with the listener gone nobody is asked.
  EXPECT_FALSE(broker_->Confirm(Login("git")));
  EXPECT_NE(LogText().find("nobody is listening"), std::string::npos);
}

TEST_F(SshConfirmTest, TheNewestListenerIsAskedAndStopHangsEveryoneUp) {
  auto old_conn = Listen();
  auto new_conn = Listen();
  auto asked = std::async(std::launch::async, [&] { return broker_->Confirm(Login("deploy")); });
  auto q = new_conn->Read(Clock::now() + std::chrono::seconds(10));
  ASSERT_TRUE(q.ok());
  EXPECT_EQ((*q)["request"], "SSH login as \"deploy\"");
  ASSERT_TRUE(new_conn->Send({{"id", (*q)["id"]}, {"allow", true}}).ok());
  EXPECT_TRUE(asked.get());
  broker_->Stop();
  for (auto* c : {old_conn.get(), new_conn.get()}) {
    auto r = c->Read(Clock::now() + std::chrono::seconds(10));
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.error().message().find("closed"), std::string::npos);
  }
  EXPECT_FALSE(broker_->Confirm(Login("git")));
}

TEST_F(SshConfirmTest, ARefusedQuestionIsARefusedSignature) {
  auto key = sshagent::Ed25519Key::Generate();
  ASSERT_TRUE(key.ok());
  sshagent::SignOnlyAgent agent(std::move(key).value(), "cloister:dev",
                                [this](const sshagent::SignRequestInfo& i) { return broker_->Confirm(i); });
  std::string data = sshagent::SshWriter()
                         .Raw("SSHSIG")
                         .String("git")
                         .String("")
                         .String("sha512")
                         .String(std::string(64, 'h'))
                         .Take();
  std::string request = sshagent::SshWriter()
                            .Byte(sshagent::kAgentcSignRequest)
                            .String(agent.key().PublicKeyBlob())
                            .String(data)
                            .Uint32(0)
                            .Take();
  // Nobody listening: FAILURE.
  EXPECT_EQ(agent.Handle(request), std::string(1, static_cast<char>(sshagent::kAgentFailure)));
  auto conn = Listen();
  for (bool answer : {false, true}) {
    auto reply = std::async(std::launch::async, [&] { return agent.Handle(request); });
    auto q = conn->Read(Clock::now() + std::chrono::seconds(10));
    ASSERT_TRUE(q.ok());
    EXPECT_EQ((*q)["request"], "sign data (ssh-keygen -Y sign, namespace \"git\")");
    ASSERT_TRUE(conn->Send({{"id", (*q)["id"]}, {"allow", answer}}).ok());
    std::string r = reply.get();
    ASSERT_FALSE(r.empty());
    EXPECT_EQ(static_cast<uint8_t>(r[0]), answer ? sshagent::kAgentSignResponse : sshagent::kAgentFailure);
  }
  EXPECT_EQ(agent.signatures(), 1u);
  EXPECT_EQ(agent.refusals(), 2u);
}

}  // namespace
}  // namespace cloister::vm
