#include "proxy/trace.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>

namespace cloister::proxy {
namespace {

TEST(TraceTest, WriteReadSummarize) {
  char tmpl[] = "/tmp/cloister-trace-XXXXXX";
  std::string dir = mkdtemp(tmpl);
  std::string path = dir + "/trace.jsonl";
  {
    auto sink = TraceSink::Open(path);
    ASSERT_TRUE(sink.ok());
    for (int i = 0; i < 10; ++i) {
      TraceRecord r;
      r.host = i < 7 ? "api.anthropic.com" : "evil.test";
      r.method = "POST";
      r.path = TracePath("/v1/messages?key=abc");
      r.status = i < 7 ? 200 : 451;
      r.latency_ms = i;
      r.bytes_up = 10;
      if (i < 7) r.swaps = {"anthropic"};
      if (i >= 7) r.leaks = {{"github", "url", "raw", "blocked"}};
      r.blocked = i >= 7;
      (*sink)->Write(r);
    }
  }
  std::ofstream(path, std::ios::app) << "not json\n";
  struct stat st;
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  auto recs = ReadTrace(path);
  ASSERT_TRUE(recs.ok());
  ASSERT_EQ(recs->size(), 10u);
  EXPECT_EQ((*recs)[0].path, "/v1/messages");
  EXPECT_EQ((*recs)[9].leaks[0].credential, "github");
  auto sum = Summarize(*recs);
  ASSERT_EQ(sum.size(), 2u);
  EXPECT_EQ(sum[0].host, "api.anthropic.com");
  EXPECT_EQ(sum[0].requests, 7u);
  EXPECT_EQ(sum[0].swaps, 7u);
  EXPECT_EQ(sum[0].p50_ms, 3);
  EXPECT_EQ(sum[1].errors, 3u);
  EXPECT_EQ(sum[1].leaks, 3u);
  EXPECT_EQ(ReadTrace(path, 4)->size(), 4u);
  EXPECT_TRUE(ReadTrace(dir + "/missing")->empty());
  std::filesystem::remove_all(dir);
}

// A trace line is written by the proxy but lies in a file a reader trusts no more than the store;
// numbers that do not fit (the fuzz finding: "time":1e21) read as 0, never as undefined behaviour.
TEST(TraceTest, NumbersThatDoNotFitReadAsZero) {
  auto r = TraceRecord::FromJson(nlohmann::json::parse(
      R"({"time":1e21,"port":70000,"status":"451","bytes_up":-1,"bytes_down":2.5,"host":"h",
          "consent":[{"credential":"c","grant_s":1e300}]})"));
  ASSERT_TRUE(r.ok()) << r.error().message();
  EXPECT_EQ(r->time_ms, 0);
  EXPECT_EQ(r->port, 0);
  EXPECT_EQ(r->status, 0);
  EXPECT_EQ(r->bytes_up, 0u);
  EXPECT_EQ(r->bytes_down, 0u);
  EXPECT_EQ(r->host, "h");
  ASSERT_EQ(r->consent.size(), 1u);
  EXPECT_EQ(r->consent[0].grant_s, 0);
}

}  // namespace
}  // namespace cloister::proxy
