#include "ui/traffic.h"

#include <gtest/gtest.h>

namespace cloister::ui {
namespace {

proxy::TraceRecord Rec(const std::string& host, int status) {
  proxy::TraceRecord r;
  r.host = host;
  r.method = "GET";
  r.status = status;
  return r;
}

TEST(TraceLinesTest, CompleteLinesOnlyAndBadLinesSkipped) {
  std::string a = Rec("a.example", 200).ToJson().dump() + "\n";
  std::string text = a + "garbage\n" + "[1,2]\n" + Rec("b.example", 451).ToJson().dump() +
                     "\n" + R"({"host":"partial)";
  TraceChunk c = ParseTraceLines(text, 100);
  ASSERT_EQ(c.records.size(), 2u);
  EXPECT_EQ(c.records[0].host, "a.example");
  EXPECT_EQ(c.records[1].status, 451);
  // The partial last line is not consumed: the next read starts at it.
  EXPECT_EQ(c.next_offset, 100 + text.find(R"({"host":"partial)"));
}

TEST(TrafficFilterTest, Filters) {
  auto f = ParseTrafficFilter({{"host", "api."}, {"status", "4xx"}});
  ASSERT_TRUE(f.ok());
  EXPECT_TRUE(f->Matches(Rec("api.example", 404)));
  EXPECT_FALSE(f->Matches(Rec("api.example", 200)));
  EXPECT_FALSE(f->Matches(Rec("www.example", 404)));
  auto refused = ParseTrafficFilter({{"only", "refused"}});
  ASSERT_TRUE(refused.ok());
  proxy::TraceRecord r = Rec("x", 403);
  EXPECT_FALSE(refused->Matches(r));
  r.error = "egress policy: x is not allowed";
  EXPECT_TRUE(refused->Matches(r));
  // An aborted request is its own kind, not a refusal of the proxy's.
  auto aborted = ParseTrafficFilter({{"only", "aborted"}});
  ASSERT_TRUE(aborted.ok());
  proxy::TraceRecord a = Rec("x", 0);
  a.abort = proxy::kAbortUpstreamTimeout;
  a.error = "upstream sent no response within 660000 ms";
  EXPECT_TRUE(aborted->Matches(a));
  EXPECT_FALSE(refused->Matches(a));
  EXPECT_FALSE(aborted->Matches(r));
  EXPECT_EQ(RecordJson(a)["aborted"], true);
  EXPECT_EQ(RecordJson(a)["refused"], false);
  EXPECT_EQ(RecordJson(r)["aborted"], false);
  for (std::map<std::string, std::string> bad :
       {std::map<std::string, std::string>{{"status", "6xx"}}, {{"limit", "0"}}, {{"limit", "5000"}},
        {{"only", "everything"}}, {{"method", "get<script>"}}, {{"nope", "1"}}}) {
    EXPECT_FALSE(ParseTrafficFilter(bad).ok()) << bad.begin()->first;
  }
}

TEST(LeakRowsTest, SaysWhatHappenedNext) {
  proxy::TraceRecord r = Rec("evil.example", 451);
  r.blocked = true;
  r.leaks.push_back({"anthropic", "header:x-api-key", "raw", "blocked"});
  nlohmann::json ws = {{"name", "alpha"}, {"state", "paused"}, {"compromised", true}};
  nlohmann::json rows = LeakRows(ws, {Rec("ok.example", 200), r});
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0]["credential"], "anthropic");
  EXPECT_EQ(rows[0]["host"], "evil.example");
  EXPECT_EQ(rows[0]["next"], "refused with 451; VM paused; wipe required");
  EXPECT_EQ(rows[0]["fix"], "cloister wipe alpha");
}

TEST(DumpTest, InvalidUtf8IsReplacedNotThrown) {
  nlohmann::json j = {{"host", std::string("a\xff\xfe")}};
  std::string s = Dump(j);
  EXPECT_NE(s.find("\xEF\xBF\xBD"), std::string::npos) << s;
}

}  // namespace
}  // namespace cloister::ui
