// The consent broker against listeners on socketpairs, with an injected clock: questions, the
// grant lengths, expiry, revoke, the VM-stop end of "vm" grants, timeouts, garbage, hang-ups, a
// withdrawn request, the one-shot ops, and SSH questions reaching a consent listener.
#include "supervisor/consent.h"

#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <future>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace cloister::vm {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

class ConsentTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ConsentBroker::Options o;
    o.workspace = "dev";
    o.timeout = std::chrono::seconds(60);
    o.now = [this] { return base_ + std::chrono::milliseconds(offset_ms_.load()); };
    o.log = [this](const std::string& line) {
      std::lock_guard<std::mutex> l(log_mu_);
      log_ += line + "\n";
    };
    broker_ = std::make_shared<ConsentBroker>(o);
  }
  void TearDown() override {
    broker_->Stop();
    for (auto& t : threads_) t.join();
  }
  void Advance(std::chrono::milliseconds d) { offset_ms_ += d.count(); }

  // A consent listener; returns the test's end, past the hello.
  std::unique_ptr<LineConn> Listen(const std::string& client = "approve") {
    int sv[2];
    EXPECT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    int before = broker_->listeners();
    threads_.emplace_back([this, fd = sv[0], client] {
      LineConn conn(fd);
      ConsentBroker::ListenerOptions lo;
      lo.client = client;
      broker_->ServeListener(conn, lo);
    });
    auto mine = std::make_unique<LineConn>(sv[1]);
    auto hello = mine->Read(Clock::now() + std::chrono::seconds(10));
    EXPECT_TRUE(hello.ok());
    if (hello.ok()) {
      EXPECT_EQ((*hello)["ok"], true);
      EXPECT_EQ((*hello)["workspace"], "dev");
    }
    auto deadline = Clock::now() + std::chrono::seconds(10);
    while (broker_->listeners() == before && Clock::now() < deadline) std::this_thread::yield();
    EXPECT_EQ(broker_->listeners(), before + 1);
    return mine;
  }
  static json Read(LineConn& c) {
    auto r = c.Read(Clock::now() + std::chrono::seconds(10));
    EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error().ToString());
    return r.ok() ? *r : json();
  }
  static proxy::ConsentQuestion Q(const std::string& cred = "github",
                                  vault::ConsentAsk ask = vault::ConsentAsk::kOnce) {
    return {cred, "api.github.com", "GET", "/user", ask};
  }
  // Polls until decided (the listener's answer travels through a socket and a thread).
  static proxy::ConsentAnswer Wait(proxy::ConsentTicket& t) {
    auto deadline = Clock::now() + std::chrono::seconds(10);
    while (!t.Poll() && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(2));
    auto a = t.Poll();
    EXPECT_TRUE(a.has_value());
    return a ? *a : proxy::ConsentAnswer{};
  }
  std::string LogText() {
    std::lock_guard<std::mutex> l(log_mu_);
    return log_;
  }

  Clock::time_point base_ = Clock::now();
  std::atomic<int64_t> offset_ms_{0};
  std::shared_ptr<ConsentBroker> broker_;
  std::vector<std::thread> threads_;
  std::mutex log_mu_;
  std::string log_;
};

TEST_F(ConsentTest, NobodyListeningIsRefusedAtOnce) {
  auto t = broker_->Ask(Q());
  auto a = t->Poll();
  ASSERT_TRUE(a.has_value());
  EXPECT_FALSE(a->allowed);
  EXPECT_EQ(a->decision, "refused");
  EXPECT_EQ(a->by, "no listener");
  EXPECT_NE(LogText().find("run `cloister approve dev`"), std::string::npos) << LogText();
}

TEST_F(ConsentTest, FiveMinutesCoverLaterUsesUntilTheInjectedClockPassesThem) {
  auto conn = Listen();
  auto t = broker_->Ask(Q());
  EXPECT_FALSE(t->Poll().has_value());  // waits
  json q = Read(*conn);
  EXPECT_EQ(q["op"], "consent");
  EXPECT_EQ(q["kind"], "cred");
  EXPECT_EQ(q["cred"], "github");
  EXPECT_EQ(q["host"], "api.github.com");
  EXPECT_EQ(q["method"], "GET");
  EXPECT_EQ(q["path"], "/user");
  EXPECT_EQ(q["ask"], "once");
  EXPECT_EQ(q["grants"], json::array({"request", "5m", "1h", "vm", "deny"}));
  ASSERT_TRUE(conn->Send({{"id", q["id"]}, {"grant", "5m"}}).ok());
  proxy::ConsentAnswer a = Wait(*t);
  EXPECT_TRUE(a.allowed);
  EXPECT_EQ(a.decision, "5m");
  EXPECT_EQ(a.grant_s, 300);
  EXPECT_EQ(a.by.rfind("approve pid ", 0), 0u) << a.by;
  json done = Read(*conn);
  EXPECT_EQ(done["op"], "consent-done");
  EXPECT_EQ(done["id"], q["id"]);
  // A second use within the 5 minutes passes without a question.
  Advance(std::chrono::minutes(4));
  auto again = broker_->Ask(Q());
  auto b = again->Poll();
  ASSERT_TRUE(b.has_value());
  EXPECT_TRUE(b->allowed);
  EXPECT_EQ(b->decision, "grant");
  EXPECT_EQ(b->grant_s, 60);
  // Past the 5 minutes it asks again.
  Advance(std::chrono::minutes(1) + std::chrono::seconds(1));
  auto later = broker_->Ask(Q());
  EXPECT_FALSE(later->Poll().has_value());
  json q2 = Read(*conn);
  EXPECT_EQ(q2["op"], "consent");
  EXPECT_NE(q2["id"], q["id"]);
  EXPECT_NE(LogText().find("grant of github expired"), std::string::npos) << LogText();
}

TEST_F(ConsentTest, ThisRequestOnlyAndAlwaysNeverCarryOver) {
  auto conn = Listen();
  auto t = broker_->Ask(Q());
  json q = Read(*conn);
  ASSERT_TRUE(conn->Send({{"id", q["id"]}, {"grant", "request"}}).ok());
  EXPECT_TRUE(Wait(*t).allowed);
  (void)Read(*conn);  // done
  auto t2 = broker_->Ask(Q());
  EXPECT_FALSE(t2->Poll().has_value());  // asks again
  json q2 = Read(*conn);
  ASSERT_TRUE(conn->Send({{"id", q2["id"]}, {"grant", "deny"}}).ok());
  proxy::ConsentAnswer denied = Wait(*t2);
  EXPECT_FALSE(denied.allowed);
  EXPECT_EQ(denied.decision, "deny");
  (void)Read(*conn);
  // `always`: an hour given to it is this request only, and it offers no more.
  auto t3 = broker_->Ask(Q("openai", vault::ConsentAsk::kAlways));
  json q3 = Read(*conn);
  EXPECT_EQ(q3["ask"], "always");
  EXPECT_EQ(q3["grants"], json::array({"request", "deny"}));
  ASSERT_TRUE(conn->Send({{"id", q3["id"]}, {"grant", "1h"}}).ok());
  proxy::ConsentAnswer once = Wait(*t3);
  EXPECT_TRUE(once.allowed);
  EXPECT_EQ(once.decision, "request");
  (void)Read(*conn);
  auto t4 = broker_->Ask(Q("openai", vault::ConsentAsk::kAlways));
  EXPECT_FALSE(t4->Poll().has_value());
}

TEST_F(ConsentTest, RevokeEndsAGrantAndABootEndsOnlyTheVmGrants) {
  auto conn = Listen();
  for (const char* g : {"1h", "vm"}) {
    auto t = broker_->Ask(Q(g == std::string("1h") ? "github" : "openai"));
    json q = Read(*conn);
    ASSERT_TRUE(conn->Send({{"id", q["id"]}, {"grant", g}}).ok());
    EXPECT_TRUE(Wait(*t).allowed);
    (void)Read(*conn);
  }
  json list = broker_->List();
  ASSERT_EQ(list["grants"].size(), 2u);
  EXPECT_TRUE(broker_->Ask(Q("openai"))->Poll().has_value());
  broker_->EndVmGrants();
  EXPECT_FALSE(broker_->Ask(Q("openai"))->Poll().has_value());  // the vm grant ended
  (void)Read(*conn);
  EXPECT_TRUE(broker_->Ask(Q("github"))->Poll()->allowed);  // the hour runs on
  EXPECT_EQ(broker_->Revoke("github")["revoked"], 1);
  auto after = broker_->Ask(Q("github"));
  EXPECT_FALSE(after->Poll().has_value());  // asks again
}

TEST_F(ConsentTest, NoAnswerWithinTheTimeoutIsRefused) {
  auto conn = Listen();
  auto t = broker_->Ask(Q());
  json q = Read(*conn);
  Advance(std::chrono::seconds(59));
  EXPECT_FALSE(t->Poll().has_value());
  Advance(std::chrono::seconds(2));
  auto a = t->Poll();
  ASSERT_TRUE(a.has_value());
  EXPECT_FALSE(a->allowed);
  EXPECT_EQ(a->by, "no answer within 60 s");
  json done = Read(*conn);
  EXPECT_EQ(done["op"], "consent-done");
  EXPECT_EQ(done["allowed"], false);
  // A late yes changes nothing, and grants nothing.
  ASSERT_TRUE(conn->Send({{"id", q["id"]}, {"grant", "vm"}}).ok());
  auto t2 = broker_->Ask(Q());
  EXPECT_FALSE(t2->Poll().has_value());
}

// The proxy's wait costs no wakeups (consent_filter.h AwaitDecision): a ticket's wake is called
// once when its question is decided (an answer, the timeout by ExpireDue, Stop) and never once
// the ticket is dropped; TimeLeft says when the timeout is due by the broker's clock.
TEST_F(ConsentTest, AWaitingTicketIsWokenByItsDecisionOnlyAndNeverOnceDropped) {
  auto conn = Listen();
  auto question = [&] {
    for (;;) {
      json q = Read(*conn);
      if (q.is_null() || q["op"] == "consent") return q;
    }
  };
  auto wait_for = [](std::atomic<int>& n, int want) {
    auto deadline = Clock::now() + std::chrono::seconds(10);
    while (n.load() < want && Clock::now() < deadline) std::this_thread::yield();
    return n.load();
  };
  // An answer wakes it, once.
  auto t = broker_->Ask(Q());
  json q = question();
  std::atomic<int> woken{0};
  t->OnDecided([&] { ++woken; });
  EXPECT_EQ(t->TimeLeft(), std::chrono::seconds(60));
  Advance(std::chrono::seconds(20));
  EXPECT_EQ(t->TimeLeft(), std::chrono::seconds(40));
  EXPECT_EQ(woken.load(), 0);  // open: nothing calls it
  ASSERT_TRUE(conn->Send({{"id", q["id"]}, {"grant", "request"}}).ok());
  EXPECT_EQ(wait_for(woken, 1), 1);
  ASSERT_TRUE(t->Poll().has_value());
  EXPECT_TRUE(t->Poll()->allowed);
  EXPECT_EQ(t->TimeLeft(), std::chrono::milliseconds(0));
  int at_once = 0;
  t->OnDecided([&] { ++at_once; });  // decided already: called on this thread, now
  EXPECT_EQ(at_once, 1);
  EXPECT_EQ(woken.load(), 1);
  // The timeout: moving the injected clock wakes nobody; ExpireDue does.
  auto late = broker_->Ask(Q());
  (void)question();
  std::atomic<int> late_woken{0};
  late->OnDecided([&] { ++late_woken; });
  Advance(std::chrono::seconds(61));
  EXPECT_EQ(late_woken.load(), 0);
  EXPECT_EQ(late->TimeLeft(), std::chrono::milliseconds(0));
  broker_->ExpireDue();
  EXPECT_EQ(late_woken.load(), 1);
  EXPECT_EQ(late->Poll()->by, "no answer within 60 s");
  // A dropped ticket's wake is never called (its question is withdrawn without it); Stop wakes
  // the ones still waiting.
  auto dropped = broker_->Ask(Q());
  (void)question();
  std::atomic<int> dropped_woken{0};
  dropped->OnDecided([&] { ++dropped_woken; });
  dropped.reset();
  auto open = broker_->Ask(Q());
  (void)question();
  std::atomic<int> open_woken{0};
  open->OnDecided([&] { ++open_woken; });
  broker_->Stop();
  EXPECT_EQ(open_woken.load(), 1);
  EXPECT_EQ(open->Poll()->by, "stopping");
  EXPECT_EQ(dropped_woken.load(), 0);
}

TEST_F(ConsentTest, GarbageAndHangUpRefuse) {
  auto conn = Listen();
  auto t = broker_->Ask(Q());
  json q = Read(*conn);
  ASSERT_TRUE(conn->Send({{"id", q["id"]}, {"grant", "forever"}}).ok());
  proxy::ConsentAnswer a = Wait(*t);
  EXPECT_FALSE(a.allowed);
  EXPECT_EQ(a.by, "garbage answer");
  (void)Read(*conn);
  // A line that is not JSON refuses every question open on this connection.
  auto t2 = broker_->Ask(Q());
  auto t3 = broker_->Ask(Q("openai"));
  (void)Read(*conn);
  (void)Read(*conn);
  const char junk[] = "yes please\n";
  ASSERT_EQ(write(conn->fd(), junk, sizeof(junk) - 1), static_cast<ssize_t>(sizeof(junk) - 1));
  EXPECT_EQ(Wait(*t2).by, "garbage answer");
  EXPECT_EQ(Wait(*t3).by, "garbage answer");
  // Hang up with a question open.
  auto t4 = broker_->Ask(Q());
  (void)Read(*conn);
  (void)Read(*conn);
  (void)Read(*conn);
  conn.reset();
  proxy::ConsentAnswer gone = Wait(*t4);
  EXPECT_FALSE(gone.allowed);
  EXPECT_EQ(gone.by, "the listener left");
}

TEST_F(ConsentTest, AGrantAnswersTheOtherWaitingUsesOfTheSameCredential) {
  auto conn = Listen();
  auto t1 = broker_->Ask(Q());
  auto t2 = broker_->Ask(Q());
  json q1 = Read(*conn);
  json q2 = Read(*conn);
  ASSERT_TRUE(conn->Send({{"id", q1["id"]}, {"grant", "1h"}}).ok());
  EXPECT_EQ(Wait(*t1).decision, "1h");
  proxy::ConsentAnswer other = Wait(*t2);
  EXPECT_TRUE(other.allowed);
  EXPECT_EQ(other.decision, "grant");
}

TEST_F(ConsentTest, ListAnswerAndAWithdrawnRequest) {
  auto conn = Listen("ui");
  auto t = broker_->Ask(Q());
  json q = Read(*conn);
  json list = broker_->List();
  EXPECT_EQ(list["listeners"], 1);
  ASSERT_EQ(list["pending"].size(), 1u);
  EXPECT_EQ(list["pending"][0]["id"], q["id"]);
  EXPECT_EQ(list["pending"][0]["cred"], "github");
  EXPECT_EQ(list["pending"][0]["expires_in_s"], 60);
  // The dashboard answers with the one-shot op.
  json r = broker_->HandleRequest({{"op", "consent-answer"}, {"id", q["id"]}, {"grant", "5m"},
                                   {"client", "ui"}}, 99);
  EXPECT_EQ(r["ok"], true) << r.dump();
  EXPECT_EQ(Wait(*t).decision, "5m");
  EXPECT_EQ(Wait(*t).by, "ui pid 99");
  (void)Read(*conn);
  list = broker_->List();
  EXPECT_TRUE(list["pending"].empty());
  ASSERT_EQ(list["grants"].size(), 1u);
  EXPECT_EQ(list["grants"][0]["grant"], "5m");
  EXPECT_EQ(list["grants"][0]["expires_in_s"], 300);
  // Answering what does not wait is an error with a hint, and so is a malformed request.
  json missing = broker_->HandleRequest({{"op", "consent-answer"}, {"id", 12345}, {"grant", "5m"}}, 1);
  EXPECT_EQ(missing["ok"], false);
  EXPECT_NE(missing["error"].get<std::string>().find("no pending question 12345"), std::string::npos);
  EXPECT_EQ(broker_->HandleRequest({{"op", "consent-answer"}, {"id", "x"}}, 1)["ok"], false);
  EXPECT_EQ(broker_->HandleRequest({{"op", "consent-revoke"}}, 1)["ok"], false);
  // A request that goes away (its ticket dropped) withdraws its question.
  {
    auto w = broker_->Ask(Q("openai"));
    (void)Read(*conn);
    EXPECT_EQ(broker_->List()["pending"].size(), 1u);
  }
  json done = Read(*conn);
  EXPECT_EQ(done["op"], "consent-done");
  EXPECT_TRUE(broker_->List()["pending"].empty());
}

TEST_F(ConsentTest, ALateListenerSeesWhatWaitsAndSshQuestionsReachConsentListeners) {
  auto first = Listen();
  auto t = broker_->Ask(Q());
  (void)Read(*first);
  auto second = Listen("ui");
  json q = Read(*second);  // the question already waiting
  EXPECT_EQ(q["cred"], "github");
  ASSERT_TRUE(second->Send({{"id", q["id"]}, {"grant", "request"}}).ok());
  EXPECT_TRUE(Wait(*t).allowed);
  (void)Read(*first);
  (void)Read(*second);
  auto asked = std::async(std::launch::async, [&] {
    return broker_->AskAndWait({"SSH login as \"git\"", "SHA256:k"});
  });
  json s = Read(*first);
  EXPECT_EQ(s["kind"], "ssh");
  EXPECT_EQ(s["request"], "SSH login as \"git\"");
  EXPECT_EQ(s["grants"], json::array({"request", "deny"}));
  (void)Read(*second);
  ASSERT_TRUE(first->Send({{"id", s["id"]}, {"grant", "request"}}).ok());
  EXPECT_TRUE(asked.get().allowed);
}

TEST_F(ConsentTest, StopRefusesWhatWaitsAndEverythingAfter) {
  auto conn = Listen();
  auto t = broker_->Ask(Q());
  (void)Read(*conn);
  broker_->Stop();
  EXPECT_EQ(Wait(*t).by, "stopping");
  EXPECT_EQ(broker_->Ask(Q())->Poll()->by, "stopping");
  EXPECT_FALSE(broker_->AskAndWait({"x", "y"}).allowed);
}

}  // namespace
}  // namespace cloister::vm
