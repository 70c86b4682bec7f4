// The consent filter against a fake gate: which requests ask, that the chain stops before any
// swap while a question is open, and that a refusal (denied, no gate, no listener) is a 403 that
// names the credential and `cloister approve`, with the placeholder still in the head.
#include "proxy/consent_filter.h"

#include <gtest/gtest.h>

#include <mutex>
#include <thread>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>

#include "proxy/credential_use.h"
#include "proxy/destination_filter.h"
#include "proxy/filter_test_util.h"
#include "vault/crypto.h"

namespace cloister::proxy::testing {
namespace {

class FakeTicket : public ConsentTicket {
 public:
  std::optional<ConsentAnswer> Poll() override { return answer; }
  std::optional<ConsentAnswer> answer;
};

class FakeGate : public ConsentGate {
 public:
  std::shared_ptr<ConsentTicket> Ask(const ConsentQuestion& q) override {
    asked.push_back(q);
    auto t = std::make_shared<FakeTicket>();
    t->answer = decide_at_once;
    last = t;
    return t;
  }
  std::optional<ConsentAnswer> decide_at_once;  // nullopt: the question stays open
  std::vector<ConsentQuestion> asked;
  std::shared_ptr<FakeTicket> last;
};

class ConsentFilterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    h.config.credentials[1].credential.ask = vault::ConsentAsk::kOnce;  // github
    h.config.consent = gate;
    h.config.workspace = "ws";
    h.Reset();
    h.Tls("api.github.com");
  }
  std::unique_ptr<Exchange> Github(const std::string& auth) {
    return h.Make("GET", "/user?x=1", {{"Host", "api.github.com"}, {"Authorization", auth}});
  }
  FilterHarness h;
  std::shared_ptr<FakeGate> gate = std::make_shared<FakeGate>();
  Chain chain = DefaultChain();
};

TEST_F(ConsentFilterTest, AnOpenQuestionStopsTheChainBeforeTheSwapAndAGrantResumesIt) {
  auto ex = Github("token " + h.Placeholder(1));
  ASSERT_TRUE(chain.OnRequestHead(*ex).ok());
  ASSERT_TRUE(ex->consent_wait);
  ASSERT_EQ(gate->asked.size(), 1u);
  EXPECT_EQ(gate->asked[0].credential, "github");
  EXPECT_EQ(gate->asked[0].host, "api.github.com");
  EXPECT_EQ(gate->asked[0].method, "GET");
  EXPECT_EQ(gate->asked[0].path, "/user");  // no query string
  // SECURITY: nothing was swapped while the question is open.
  EXPECT_EQ(std::string(ex->req["Authorization"]), "token " + h.Placeholder(1));
  EXPECT_TRUE(ex->rec.swaps.empty());
  // The person grants 5 minutes: the chain resumes at the consent filter and swaps.
  gate->last->answer = ConsentAnswer{true, "5m", "approve pid 7", 300, true};
  ASSERT_TRUE(chain.OnRequestHead(*ex).ok());
  EXPECT_FALSE(ex->consent_wait);
  EXPECT_EQ(std::string(ex->req["Authorization"]), "token " + h.Real(1));
  EXPECT_EQ(ex->rec.swaps, std::vector<std::string>{"github"});
  ASSERT_EQ(ex->rec.consent.size(), 1u);
  EXPECT_EQ(ex->rec.consent[0].decision, "5m");
  EXPECT_EQ(ex->rec.consent[0].by, "approve pid 7");
  EXPECT_EQ(ex->rec.consent[0].grant_s, 300);
  EXPECT_TRUE(ex->rec.consent[0].asked);
  EXPECT_EQ(gate->asked.size(), 1u);  // not asked twice
}

TEST_F(ConsentFilterTest, ADenialIsA403NamingTheCredentialAndTheVerbAndNothingIsSwapped) {
  auto ex = Github("token " + h.Placeholder(1));
  ASSERT_TRUE(chain.OnRequestHead(*ex).ok());
  gate->last->answer = ConsentAnswer{false, "deny", "approve pid 7", 0};
  Status st = chain.OnRequestHead(*ex);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(ex->reply_status, 403);
  EXPECT_NE(ex->reply_reason.find("credential github needs the user's consent"), std::string::npos)
      << ex->reply_reason;
  EXPECT_NE(ex->reply_reason.find("cloister approve ws"), std::string::npos) << ex->reply_reason;
  EXPECT_EQ(std::string(ex->req["Authorization"]), "token " + h.Placeholder(1));
  ASSERT_EQ(ex->rec.consent.size(), 1u);
  EXPECT_EQ(ex->rec.consent[0].decision, "deny");
}

TEST_F(ConsentFilterTest, RefusedAtOnceWithoutAListenerOrWithoutAGate) {
  gate->decide_at_once = ConsentAnswer{false, "refused", "no listener", 0};
  auto ex = Github("token " + h.Placeholder(1));
  ASSERT_FALSE(chain.OnRequestHead(*ex).ok());
  EXPECT_EQ(ex->reply_status, 403);
  EXPECT_NE(ex->reply_reason.find("refused: no listener"), std::string::npos) << ex->reply_reason;
  EXPECT_EQ(std::string(ex->req["Authorization"]), "token " + h.Placeholder(1));
  // SECURITY: no gate at all is a refusal too (fail closed), never a swap.
  h.config.consent = nullptr;
  auto none = Github("token " + h.Placeholder(1));
  ASSERT_FALSE(chain.OnRequestHead(*none).ok());
  EXPECT_EQ(none->reply_status, 403);
  EXPECT_EQ(std::string(none->req["Authorization"]), "token " + h.Placeholder(1));
}

TEST_F(ConsentFilterTest, AGrantAtOnceSwapsAndIsRecordedAsNotAsked) {
  gate->decide_at_once = ConsentAnswer{true, "grant", "approve pid 7 (1h)", 3500};
  auto ex = Github("Basic " + vault::Base64Encode("x-access-token:" + h.Placeholder(1)));
  ASSERT_TRUE(chain.OnRequestHead(*ex).ok());
  EXPECT_FALSE(ex->consent_wait);
  EXPECT_EQ(std::string(ex->req["Authorization"]),
            "Basic " + vault::Base64Encode("x-access-token:" + h.Real(1)));
  ASSERT_EQ(ex->rec.consent.size(), 1u);
  EXPECT_FALSE(ex->rec.consent[0].asked);
  EXPECT_EQ(ex->rec.consent[0].decision, "grant");
}

TEST_F(ConsentFilterTest, OnlyAUseOfAnAskCredentialAsks) {
  // No placeholder in the credential's header: nothing would be swapped, nobody is asked.
  auto anon = h.Make("GET", "/", {{"Host", "api.github.com"}});
  ASSERT_TRUE(chain.OnRequestHead(*anon).ok());
  EXPECT_FALSE(anon->consent_wait);
  // The placeholder in a header that is not the credential's: no swap, no question.
  auto other = h.Make("GET", "/", {{"Host", "api.github.com"}, {"X-Note", h.Placeholder(1)}});
  ASSERT_TRUE(chain.OnRequestHead(*other).ok());
  EXPECT_FALSE(other->consent_wait);
  // A credential with ask off (anthropic) is swapped without a question.
  h.Tls("api.anthropic.com");
  auto off = h.Make("GET", "/", {{"Host", "api.anthropic.com"}, {"x-api-key", h.Placeholder(0)}});
  ASSERT_TRUE(chain.OnRequestHead(*off).ok());
  EXPECT_EQ(std::string(off->req["x-api-key"]), h.Real(0));
  // Plain HTTP never gets a real value, so it never asks either.
  h.origin = Origin{};
  auto plain = h.Make("GET", "http://api.github.com/", {{"Host", "api.github.com"},
                                                        {"Authorization", "token " + h.Placeholder(1)}});
  ASSERT_TRUE(chain.OnRequestHead(*plain).ok());
  EXPECT_FALSE(plain->consent_wait);
  EXPECT_TRUE(gate->asked.empty());
}

TEST_F(ConsentFilterTest, BodySwapCredentialsAskWheneverInScope) {
  h.config.credentials[1].credential.body_substitution = true;
  h.Reset();
  auto ex = h.Make("POST", "/login", {{"Host", "api.github.com"}});
  ex->had_body = true;
  ASSERT_TRUE(DestinationFilter().OnRequestHead(*ex).ok());
  EXPECT_TRUE(WouldSwap(*ex, 1).any());
  EXPECT_TRUE(WouldSwap(*ex, 1).body);
  EXPECT_FALSE(WouldSwap(*ex, 0).any());
}

// A ticket that wakes its waiter when decided (as the broker's does).
class WakingTicket : public ConsentTicket {
 public:
  std::optional<ConsentAnswer> Poll() override {
    std::lock_guard<std::mutex> l(mu);
    return answer;
  }
  void OnDecided(std::function<void()> w) override {
    std::unique_lock<std::mutex> l(mu);
    if (!answer) {
      wake = std::move(w);
      return;
    }
    l.unlock();
    if (w) w();
  }
  std::chrono::milliseconds TimeLeft() override { return left; }
  void Decide(ConsentAnswer a) {
    std::function<void()> w;
    {
      std::lock_guard<std::mutex> l(mu);
      answer = std::move(a);
      w = std::move(wake);
    }
    if (w) w();
  }
  std::mutex mu;
  std::optional<ConsentAnswer> answer;
  std::function<void()> wake;
  std::chrono::milliseconds left{std::chrono::minutes(10)};
};

// Starts AwaitDecision(t) on `io` and runs it to its wait; `result` is set when it returns.
void StartAwait(boost::asio::io_context& io, ConsentTicket& t, std::optional<bool>& result) {
  boost::asio::co_spawn(
      io,
      [&t, &result]() -> boost::asio::awaitable<void> {
        result = co_await AwaitDecision(t, std::chrono::steady_clock::now() + std::chrono::minutes(10));
      },
      boost::asio::detached);
  io.poll();
}

TEST(AwaitDecisionTest, AnOpenQuestionRunsNothingUntilTheDecisionWakesTheWait) {
  boost::asio::io_context io;
  WakingTicket t;
  std::optional<bool> result;
  StartAwait(io, t, result);
  ASSERT_FALSE(result.has_value());
  // Open: not one handler runs on the loop (a 25 ms poll would run about eight in this time).
  EXPECT_EQ(io.run_for(std::chrono::milliseconds(200)), 0u);
  EXPECT_FALSE(result.has_value());
  // The decision comes from another thread (the broker's listener) and ends the wait.
  std::thread([&t] { t.Decide(ConsentAnswer{true, "request", "approve pid 7", 0, true}); }).join();
  io.run_for(std::chrono::seconds(30));
  ASSERT_TRUE(result.has_value());
  EXPECT_TRUE(*result);
  EXPECT_TRUE(t.Poll().has_value());
  EXPECT_FALSE(t.wake);  // the wait took its wake back
}

TEST(AwaitDecisionTest, ADecidedTicketOrADueTimeoutEndsTheWaitAtOnce) {
  {
    boost::asio::io_context io;
    WakingTicket t;
    t.answer = ConsentAnswer{false, "deny", "approve pid 7", 0, true};
    std::optional<bool> result;
    StartAwait(io, t, result);
    io.run_for(std::chrono::seconds(30));
    ASSERT_TRUE(result.has_value());
    EXPECT_TRUE(*result);
  }
  {
    // Undecided and never woken, but the gate's timeout is due: the timer runs out (the caller
    // Polls, and the gate decides the timeout there).
    boost::asio::io_context io;
    WakingTicket t;
    t.left = std::chrono::milliseconds(0);
    std::optional<bool> result;
    StartAwait(io, t, result);
    io.run_for(std::chrono::seconds(30));
    ASSERT_TRUE(result.has_value());
    EXPECT_TRUE(*result);
    EXPECT_FALSE(t.Poll().has_value());
  }
}

}  // namespace
}  // namespace cloister::proxy::testing
