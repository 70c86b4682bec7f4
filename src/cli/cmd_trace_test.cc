#include <gtest/gtest.h>

#include <filesystem>
#include <sstream>

#include "base/strings.h"
#include "cli/cli.h"
#include "cli/testing.h"
#include "store/store.h"
#include "proxy/trace.h"

namespace cloister::cli {
namespace {

class TraceCliTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_EQ(store_.CreateWorkspace("dev"), ""); }
  int Run(std::vector<std::string> args, std::string* out) {
    testing::Outcome r = store_.Run(args);
    *out = r.out + r.err;
    return r.code;
  }
  void Write(std::vector<proxy::TraceRecord> recs) {
    auto sink = proxy::TraceSink::Open(root_ + "/workspaces/dev/trace.jsonl");
    for (const auto& r : recs) (*sink)->Write(r);
  }
  testing::TempStore store_{"tracecli"};
  const std::string& root_ = store_.root();
};

TEST_F(TraceCliTest, LsSummaryLeaks) {
  std::string out;
  EXPECT_EQ(Run({"trace", "leaks", "dev"}, &out), 0);
  EXPECT_NE(out.find("No placeholder left its scope"), std::string::npos);

  proxy::TraceRecord ok;
  ok.time_ms = 1700000000000;
  ok.host = "api.anthropic.com";
  ok.method = "POST";
  ok.path = "/v1/messages";
  ok.status = 200;
  ok.swaps = {"anthropic"};
  proxy::TraceRecord bad = ok;
  bad.host = "evil.test";
  bad.status = 451;
  bad.swaps = {};
  bad.blocked = true;
  bad.leaks = {{"github", "url", "base64", "blocked"}};
  Write({ok, ok, bad});

  EXPECT_EQ(Run({"trace", "ls", "dev"}, &out), 0);
  EXPECT_NE(out.find("2023-11-14T22:13:20Z  200  POST api.anthropic.com/v1/messages"),
            std::string::npos) << out;
  EXPECT_NE(out.find("swaps=anthropic"), std::string::npos);
  EXPECT_NE(out.find("LEAK github@url/base64:blocked"), std::string::npos);
  EXPECT_EQ(Run({"trace", "ls", "dev", "-n", "1", "--json"}, &out), 0);
  auto j = nlohmann::json::parse(out);
  ASSERT_EQ(j.size(), 1u);
  EXPECT_EQ(j[0]["host"], "evil.test");

  EXPECT_EQ(Run({"trace", "summary", "dev", "--json"}, &out), 0);
  j = nlohmann::json::parse(out);
  ASSERT_EQ(j.size(), 2u);
  EXPECT_EQ(j[0]["host"], "api.anthropic.com");
  EXPECT_EQ(j[0]["requests"], 2);
  EXPECT_EQ(j[0]["swaps"], 2);

  EXPECT_EQ(Run({"trace", "leaks", "dev"}, &out), kExitError);  // a blocked leak: exit 1
  EXPECT_NE(out.find("BLOCKED  POST evil.test/v1/messages  github@url/base64:blocked"),
            std::string::npos) << out;
  EXPECT_NE(Run({"trace", "ls", "nope"}, &out), 0);
}

// A request that ended without a whole response is shown as such, with its reason and phases
// kept in --json.
TEST_F(TraceCliTest, LsShowsAbortedRequestsDistinctly) {
  proxy::TraceRecord cut;
  cut.time_ms = 1700000000000;
  cut.host = "registry.npmjs.test";
  cut.method = "GET";
  cut.path = "/pkg/-/pkg-1.0.0.tgz";
  cut.status = 200;
  cut.abort = proxy::kAbortClientGone;
  cut.error = "the client went away during the response";
  cut.phases.connect_ms = 1.5;
  cut.phases.first_byte_ms = 12;
  proxy::TraceRecord whole = cut;
  whole.abort.clear();
  whole.error.clear();
  Write({whole, cut});
  std::string out;
  EXPECT_EQ(Run({"trace", "ls", "dev"}, &out), 0);
  auto lines = Split(out, '\n');
  ASSERT_GE(lines.size(), 2u);
  EXPECT_EQ(lines[0].find("ABORTED"), std::string::npos) << lines[0];
  EXPECT_NE(lines[1].find("ABORTED client_gone  (the client went away during the response)"),
            std::string::npos) << lines[1];
  EXPECT_EQ(Run({"trace", "ls", "dev", "-n", "1", "--json"}, &out), 0);
  auto j = nlohmann::json::parse(out);
  ASSERT_EQ(j.size(), 1u);
  EXPECT_EQ(j[0]["abort"], "client_gone");
  EXPECT_EQ(j[0]["phases"]["first_byte_ms"], 12);
  EXPECT_FALSE(j[0]["phases"].contains("dns_ms"));
  EXPECT_EQ(Run({"trace", "summary", "dev", "--json"}, &out), 0);
  EXPECT_EQ(nlohmann::json::parse(out)[0]["errors"], 1);
}

}  // namespace
}  // namespace cloister::cli
