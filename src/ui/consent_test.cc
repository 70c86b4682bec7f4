#include "ui/consent.h"
#include "ui/fake_supervisor.h"

#include <chrono>
#include <thread>

#include <gtest/gtest.h>

namespace cloister::ui {
namespace {

using testing::FakeSupervisor;

nlohmann::json WaitPending(ConsentDesk& desk, size_t n) {
  for (int i = 0; i < 600; ++i) {  // bounded: 60 s on a loaded machine
    nlohmann::json p = desk.Pending();
    if (p.size() >= n) return p;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return desk.Pending();
}

TEST(ConsentQuestionTest, KeepsOnlyKnownBoundedFields) {
  auto q = ParseConsentQuestion(
      R"({"op":"consent","id":7,"kind":"cred","cred":"github","host":"api.github.com\u001b[2J",)"
      R"("method":"GET","path":"/user","ask":"once","grants":["request","5m","forever",3],)"
      R"("timeout_s":60,"extra":"<script>"})");
  ASSERT_TRUE(q.has_value());
  EXPECT_EQ((*q)["host"], "api.github.com[2J") << "control bytes removed";
  EXPECT_EQ((*q)["grants"], nlohmann::json({"request", "5m"}));
  EXPECT_FALSE(q->contains("extra"));
  for (const char* bad : {"not json", R"({"op":"consent"})", R"({"op":"consent","id":"7"})",
                          R"({"op":"consent-done","id":7})", R"({"op":"consent","id":-1})"}) {
    EXPECT_FALSE(ParseConsentQuestion(bad).has_value()) << bad;
  }
  std::string big(kMaxConsentField * 4, 'a');
  auto long_host = ParseConsentQuestion(R"({"op":"consent","id":1,"host":")" + big + "\"}");
  ASSERT_TRUE(long_host.has_value());
  EXPECT_EQ((*long_host)["host"].get<std::string>().size(), kMaxConsentField);
}

TEST(ConsentDeskTest, ListensShowsAndAnswers) {
  FakeSupervisor sup({R"({"ok":true,"workspace":"alpha","grants":["request","5m","1h","vm","deny"]})",
                      R"({"op":"consent","id":7,"kind":"cred","workspace":"alpha","cred":"github",)"
                      R"("host":"api.github.com","method":"GET","path":"/user","ask":"once",)"
                      R"("grants":["request","5m","1h","vm","deny"],"timeout_s":60})"});
  ConsentDesk desk([&] { return std::map<std::string, std::string>{{"alpha", sup.path()}}; },
                   std::chrono::milliseconds(50));
  nlohmann::json p = WaitPending(desk, 1);
  ASSERT_EQ(p.size(), 1u) << p.dump();
  EXPECT_EQ(p[0]["workspace"], "alpha");
  EXPECT_EQ(p[0]["cred"], "github");
  EXPECT_EQ(nlohmann::json::parse(sup.hello())["op"], "consent-listen");
  // A grant it does not offer, or a question it does not hold: refused, nothing sent.
  EXPECT_EQ(desk.Answer("alpha", 8, "5m").error().code(), ErrorCode::kNotFound);
  EXPECT_EQ(desk.Answer("beta", 7, "5m").error().code(), ErrorCode::kNotFound);
  ASSERT_TRUE(desk.Answer("alpha", 7, "5m").ok());
  EXPECT_EQ(nlohmann::json::parse(sup.Join()), nlohmann::json({{"id", 7}, {"grant", "5m"}}));
  EXPECT_TRUE(desk.Pending().empty());
}

TEST(ConsentDeskTest, DoneRemovesAndOfferedGrantsOnly) {
  FakeSupervisor sup({R"({"ok":true})",
                      R"({"op":"consent","id":1,"kind":"ssh","cred":"ssh","request":"SSH login",)"
                      R"("grants":["request","deny"],"ask":"always"})",
                      R"({"op":"consent","id":2,"kind":"cred","cred":"openai","grants":["request","deny"]})",
                      R"({"op":"consent-done","id":2,"decision":"deny","by":"approve","allowed":false})"});
  ConsentDesk desk([&] { return std::map<std::string, std::string>{{"alpha", sup.path()}}; },
                   std::chrono::milliseconds(50));
  nlohmann::json p = WaitPending(desk, 1);
  // Both arrive before the done line is read, then 2 goes: wait for exactly the one left.
  for (int i = 0; i < 100 && desk.Pending().size() != 1; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  p = desk.Pending();
  ASSERT_EQ(p.size(), 1u) << p.dump();
  EXPECT_EQ(p[0]["id"], 1);
  Status longer = desk.Answer("alpha", 1, "1h");
  ASSERT_FALSE(longer.ok());
  EXPECT_EQ(longer.error().code(), ErrorCode::kInvalidArgument);
  ASSERT_TRUE(desk.Answer("alpha", 1, "deny").ok());
  EXPECT_EQ(nlohmann::json::parse(sup.Join())["grant"], "deny");
}

// SECURITY: only a listener the supervisor accepted is one: a socket that answers the hello with
// anything but {"ok":true} (a stale socket reused by something else, a refusal) gets no questions
// shown from it, and neither does a peer whose line is longer than the bound (LineConn drops it).
TEST(ConsentDeskTest, NoQuestionsFromARefusedOrUnboundedListener) {
  const std::string question =
      R"({"op":"consent","id":9,"kind":"cred","cred":"github","grants":["request","deny"]})";
  for (const std::string& first :
       {std::string(R"({"ok":false,"error":"not a consent broker"})"), std::string("[1,2]"),
        // A well-formed question past the line bound (80 KiB of padding): dropped unread.
        std::string(R"({"ok":true})") + "\n" + R"({"op":"consent","id":8,"cred":"github","pad":")" +
            std::string(80 * 1024, 'x') + "\"}"}) {
    FakeSupervisor sup({first, question});
    ConsentDesk desk([&] { return std::map<std::string, std::string>{{"alpha", sup.path()}}; },
                     std::chrono::milliseconds(50));
    // Until the desk hangs up (the fake's read of an answer ends) or shows the question (bounded:
    // 60 s on a loaded machine).
    for (int i = 0; i < 600 && !sup.done() && desk.Pending().empty(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    EXPECT_TRUE(sup.done()) << first.substr(0, 60) << ": the desk kept the connection";
    EXPECT_TRUE(desk.Pending().empty()) << first.substr(0, 60) << ": " << desk.Pending().dump();
  }
}

}  // namespace
}  // namespace cloister::ui
