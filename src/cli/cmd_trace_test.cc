#include <gtest/gtest.h>

#include <filesystem>
#include <sstream>

#include "cli/cli.h"
#include "store/store.h"
#include "proxy/trace.h"

namespace cloister::cli {
namespace {

class TraceCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/cloister-tracecli-XXXXXX";
    root_ = mkdtemp(tmpl);
    // A real workspace (the verbs find it through the store): a sparse base, a small home.
    ASSERT_TRUE(Env::Default()->Truncate(root_ + "/base.raw", 16 << 20).ok());
    auto store = Store::Open(root_);
    ASSERT_TRUE(store.ok());
    CreateRequest req;
    req.name = "dev";
    req.image = root_ + "/base.raw";
    req.home_size = 64 << 20;
    auto created = (*store)->Create(req);
    ASSERT_TRUE(created.ok()) << created.error().ToString();
  }
  void TearDown() override { std::filesystem::remove_all(root_); }
  int Run(std::vector<std::string> args, std::string* out) {
    std::vector<const char*> argv = {"cloister", "--store", root_.c_str()};
    for (const auto& a : args) argv.push_back(a.c_str());
    std::ostringstream o, e;
    std::istringstream in;
    int code = RunCli(static_cast<int>(argv.size()), argv.data(), o, e, in);
    *out = o.str() + e.str();
    return code;
  }
  void Write(std::vector<proxy::TraceRecord> recs) {
    auto sink = proxy::TraceSink::Open(root_ + "/workspaces/dev/trace.jsonl");
    for (const auto& r : recs) (*sink)->Write(r);
  }
  std::string root_;
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

}  // namespace
}  // namespace cloister::cli
