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

}  // namespace
}  // namespace cloister::proxy
