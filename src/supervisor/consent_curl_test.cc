// Ask-before-use consent end to end without a VM: real curl through the real proxy on loopback,
// the proxy asking the real consent broker, a listener on a socketpair answering as `cloister
// approve` would, an injected clock for the grant lengths and the timeout. A request waits; is
// refused with no listener; is allowed for 5 minutes (a second request passes with no question,
// one after the clock passed 5 minutes asks again); revoke ends a grant; garbage, silence and a
// hang-up refuse. Every refusal is a 403 naming the credential and `cloister approve`, and the
// upstream never sees the real value without a grant. Label: integration (needs curl).
#include <sys/socket.h>

#include <atomic>
#include <future>
#include <map>
#include <thread>

#include <gtest/gtest.h>

#include "base/subprocess.h"
#include "proxy/test_env.h"
#include "supervisor/consent.h"

namespace cloister::vm {
namespace {

using nlohmann::json;
using proxy::testing::CurlOut;
using proxy::testing::kRealGithub;
using Clock = std::chrono::steady_clock;

class ConsentCurlTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!ProgramExists("curl")) GTEST_SKIP() << "curl not installed";
    ConsentBroker::Options o;
    o.workspace = "ws";
    o.timeout = std::chrono::seconds(60);
    o.now = [this] { return base_ + std::chrono::milliseconds(offset_ms_.load()); };
    broker_ = std::make_shared<ConsentBroker>(o);
    env_.creds[1].credential.ask = vault::ConsentAsk::kOnce;  // github asks
    env_.consent = broker_;
    auto up = proxy::testing::FakeUpstream::Start(env_.upstream_ca, [](const proxy::testing::SeenRequest& r,
                                                              proxy::testing::ResponseWriter& w) {
      bool real = r.Header("authorization") == "token " + kRealGithub;
      w.Send(real ? 200 : 401, {{"Content-Type", "text/plain"}}, real ? "welcome" : "bad token");
    });
    ASSERT_TRUE(up.ok());
    upstream_ = std::move(up).value();
    env_.StartProxy({{"api.github.com:443", upstream_->Address()}});
  }
  void TearDown() override {
    if (broker_) broker_->Stop();
    for (auto& t : threads_) t.join();
  }
  void Advance(std::chrono::milliseconds d) { offset_ms_ += d.count(); }

  CurlOut Curl() {
    return proxy::testing::RunCurl({"-x", env_.ProxyUrl(), "--cacert", env_.ca_file, "-H",
                                    "Authorization: token " + env_.Placeholder(1),
                                    "https://api.github.com/user"});
  }
  std::future<CurlOut> CurlAsync() {
    return std::async(std::launch::async, [this] { return Curl(); });
  }
  std::unique_ptr<LineConn> Listen() {
    int sv[2];
    EXPECT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    threads_.emplace_back([this, fd = sv[0]] {
      LineConn conn(fd);
      broker_->ServeListener(conn, {});
    });
    auto mine = std::make_unique<LineConn>(sv[1]);
    EXPECT_TRUE(mine->Read(Clock::now() + std::chrono::seconds(10)).ok());
    auto deadline = Clock::now() + std::chrono::seconds(10);
    while (broker_->listeners() == 0 && Clock::now() < deadline) std::this_thread::yield();
    return mine;
  }
  // The next question (skipping consent-done lines).
  static json Question(LineConn& c) {
    for (;;) {
      auto r = c.Read(Clock::now() + std::chrono::seconds(30));
      EXPECT_TRUE(r.ok());
      if (!r.ok()) return json();
      if ((*r)["op"] == "consent") return *r;
    }
  }
  size_t RealSeen() {
    size_t n = 0;
    for (const auto& r : upstream_->requests()) n += r.Header("authorization") == "token " + kRealGithub;
    return n;
  }
  static void ExpectRefusal(const CurlOut& r, const std::string& why) {
    EXPECT_EQ(r.code, 403) << r.body << r.err;
    EXPECT_NE(r.body.find("credential github needs the user's consent"), std::string::npos) << r.body;
    EXPECT_NE(r.body.find(why), std::string::npos) << r.body;
    EXPECT_NE(r.body.find("`cloister approve ws`"), std::string::npos) << r.body;
  }

  proxy::testing::ProxyEnv env_;
  std::unique_ptr<proxy::testing::FakeUpstream> upstream_;
  Clock::time_point base_ = Clock::now();
  std::atomic<int64_t> offset_ms_{0};
  std::shared_ptr<ConsentBroker> broker_;
  std::vector<std::thread> threads_;
};

TEST_F(ConsentCurlTest, NobodyListeningIsA403AndTheUpstreamNeverSeesTheToken) {
  CurlOut r = Curl();
  ExpectRefusal(r, "refused: no listener");
  EXPECT_TRUE(upstream_->requests().empty());
  auto trace = env_.TraceAtLeast(1);
  ASSERT_EQ(trace.size(), 1u);
  ASSERT_EQ(trace[0].consent.size(), 1u);
  EXPECT_EQ(trace[0].consent[0].credential, "github");
  EXPECT_EQ(trace[0].consent[0].decision, "refused");
  EXPECT_EQ(trace[0].consent[0].by, "no listener");
  EXPECT_EQ(trace[0].status, 403);
}

TEST_F(ConsentCurlTest, ARequestWaitsThenFiveMinutesCoverTheNextUntilTheClockPassesThem) {
  auto conn = Listen();
  auto first = CurlAsync();
  json q = Question(*conn);
  // The request waits: curl has no answer and nothing reached the upstream.
  EXPECT_EQ(first.wait_for(std::chrono::seconds(0)), std::future_status::timeout);
  EXPECT_TRUE(upstream_->requests().empty());
  EXPECT_EQ(q["cred"], "github");
  EXPECT_EQ(q["host"], "api.github.com");
  EXPECT_EQ(q["path"], "/user");
  ASSERT_TRUE(conn->Send({{"id", q["id"]}, {"grant", "5m"}}).ok());
  CurlOut r = first.get();
  EXPECT_EQ(r.code, 200) << r.body << r.err;
  EXPECT_EQ(r.body, "welcome");
  EXPECT_EQ(RealSeen(), 1u);
  // Within the 5 minutes: no question (the trace says a grant covered it).
  Advance(std::chrono::minutes(4));
  CurlOut second = Curl();
  EXPECT_EQ(second.code, 200) << second.body;
  EXPECT_EQ(RealSeen(), 2u);
  // (Records are written after each response went out: the two may land in either order.)
  auto trace = env_.TraceAtLeast(2);
  ASSERT_EQ(trace.size(), 2u);
  std::map<std::string, proxy::ConsentRecord> by_decision;
  for (const auto& t : trace) {
    ASSERT_EQ(t.consent.size(), 1u);
    by_decision[t.consent[0].decision] = t.consent[0];
  }
  ASSERT_EQ(by_decision.count("5m"), 1u);
  EXPECT_EQ(by_decision["5m"].grant_s, 300);
  EXPECT_TRUE(by_decision["5m"].asked);
  EXPECT_EQ(by_decision["5m"].by.rfind("approve pid ", 0), 0u) << by_decision["5m"].by;
  ASSERT_EQ(by_decision.count("grant"), 1u);
  EXPECT_FALSE(by_decision["grant"].asked);
  EXPECT_EQ(by_decision["grant"].grant_s, 60);
  // Past the 5 minutes the next request asks again; this time the user denies it.
  Advance(std::chrono::minutes(1) + std::chrono::seconds(1));
  auto third = CurlAsync();
  json q3 = Question(*conn);
  EXPECT_NE(q3["id"], q["id"]);
  ASSERT_TRUE(conn->Send({{"id", q3["id"]}, {"grant", "deny"}}).ok());
  ExpectRefusal(third.get(), "denied by approve pid ");
  EXPECT_EQ(RealSeen(), 2u);
}

TEST_F(ConsentCurlTest, RevokeEndsAGrantAndGarbageRefuses) {
  auto conn = Listen();
  auto first = CurlAsync();
  json q = Question(*conn);
  ASSERT_TRUE(conn->Send({{"id", q["id"]}, {"grant", "vm"}}).ok());
  EXPECT_EQ(first.get().code, 200);
  EXPECT_EQ(Curl().code, 200);  // until the VM stops: no question
  EXPECT_EQ(broker_->Revoke("github")["revoked"], 1);
  auto after = CurlAsync();
  json q2 = Question(*conn);  // asks again
  ASSERT_TRUE(conn->Send({{"id", q2["id"]}, {"grant", "yes"}}).ok());  // garbage
  ExpectRefusal(after.get(), "refused: garbage answer");
  EXPECT_EQ(RealSeen(), 2u);
}

TEST_F(ConsentCurlTest, SilenceAndAHangUpRefuse) {
  auto conn = Listen();
  auto silent = CurlAsync();
  (void)Question(*conn);
  Advance(std::chrono::seconds(61));  // the injected clock passes the 60 s timeout
  broker_->ExpireDue();  // the waiting proxy sleeps by the real clock: wake it
  ExpectRefusal(silent.get(), "refused: no answer within 60 s");
  auto hung = CurlAsync();
  (void)Question(*conn);
  conn.reset();
  ExpectRefusal(hung.get(), "refused: the listener left");
  EXPECT_EQ(RealSeen(), 0u);
  EXPECT_TRUE(upstream_->requests().empty());
}

}  // namespace
}  // namespace cloister::vm
