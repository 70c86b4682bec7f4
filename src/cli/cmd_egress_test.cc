// `cloister egress`: shows, changes and validates the workspace's egress policy, stored in
// config.json where the supervisor reads it at each boot. In-process, temp store, real workspace.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli/testing.h"
#include "proxy/policy.h"
#include "store/store.h"

namespace cloister::cli {
namespace {

class EgressCliTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_EQ(store_.CreateWorkspace("dev"), ""); }
  testing::Outcome Run(std::vector<std::string> args) { return store_.Run(args); }
  nlohmann::json Json(std::vector<std::string> args) {
    args.push_back("--json");
    testing::Outcome o = Run(args);
    EXPECT_EQ(o.code, 0) << o.err;
    return nlohmann::json::parse(o.out, nullptr, false);
  }
  proxy::EgressPolicy Stored() {
    auto store = Store::Open(store_.root());
    EXPECT_TRUE(store.ok());
    auto cfg = (*store)->LoadConfig("dev");
    EXPECT_TRUE(cfg.ok());
    auto p = proxy::EgressPolicyFromConfig(*cfg);
    EXPECT_TRUE(p.ok());
    return p.ok() ? *p : proxy::EgressPolicy{};
  }
  testing::TempStore store_{"egresscli"};
};

TEST_F(EgressCliTest, ShowsChangesAndStores) {
  testing::Outcome show = Run({"egress", "dev"});
  ASSERT_EQ(show.code, 0) << show.err;
  EXPECT_NE(show.out.find("every destination is allowed"), std::string::npos) << show.out;
  EXPECT_NE(show.out.find("entries: (none)"), std::string::npos);
  EXPECT_TRUE(Stored().allow_all);

  // --allow switches to allowlist mode and normalises.
  nlohmann::json j = Json({"egress", "dev", "--allow", "API.Example.com.", "--allow", "*.npm.test",
                           "--allow", "db.lan:5432"});
  EXPECT_EQ(j["allow_all"], false);
  EXPECT_EQ(j["allow"], nlohmann::json({"api.example.com", "*.npm.test", "db.lan:5432"}));
  EXPECT_EQ(j["opaque_tunnels"], nlohmann::json({"db.lan:5432"}));
  EXPECT_EQ(j["applies_at_next_start"], false);
  proxy::EgressPolicy p = Stored();
  EXPECT_FALSE(p.allow_all);
  EXPECT_TRUE(p.Allows("api.example.com", 443));
  EXPECT_TRUE(p.Allows("registry.npm.test", 443));
  EXPECT_FALSE(p.Allows("elsewhere.test", 443));
  EXPECT_TRUE(p.AllowsOpaque("db.lan", 5432));

  testing::Outcome text = Run({"egress", "dev"});
  EXPECT_NE(text.out.find("only the entries below are allowed"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("db.lan:5432  (opaque tunnel allowed)"), std::string::npos) << text.out;

  // Adding an entry twice keeps one; --remove takes it out; --allow-all keeps the entries.
  j = Json({"egress", "dev", "--allow", "db.lan:5432", "--remove", "*.npm.test", "--allow-all"});
  EXPECT_EQ(j["allow_all"], true);
  EXPECT_EQ(j["allow"], nlohmann::json({"api.example.com", "db.lan:5432"}));
  EXPECT_TRUE(Stored().allow_all);
  // --allowlist with no other change restricts to the entries.
  EXPECT_EQ(Json({"egress", "dev", "--allowlist"})["allow_all"], false);

  // Refusals change nothing.
  nlohmann::json before = Json({"egress", "dev"});
  for (const auto& bad : std::vector<std::vector<std::string>>{
           {"egress", "dev", "--allow", "a b"},
           {"egress", "dev", "--allow", "x.test:0"},
           {"egress", "dev", "--allow", "x.*.test"},
           {"egress", "dev", "--remove", "nothere.test"},
           {"egress", "dev", "--allow-all", "--allowlist"},
           {"egress", "nope"}}) {
    testing::Outcome o = Run(bad);
    EXPECT_NE(o.code, 0) << bad.back();
    EXPECT_FALSE(o.err.empty());
  }
  EXPECT_EQ(Json({"egress", "dev"}), before);

  // --reset: the defaults.
  j = Json({"egress", "dev", "--reset"});
  EXPECT_EQ(j["allow_all"], true);
  EXPECT_TRUE(j["allow"].empty());
  EXPECT_EQ(Stored(), proxy::EgressPolicy{});
}

TEST_F(EgressCliTest, DamagedPolicyIsReportedAndReset) {
  auto store = Store::Open(store_.root());
  ASSERT_TRUE(store.ok());
  ASSERT_TRUE((*store)->UpdateConfig("dev", [](WorkspaceConfig& c) {
    c.extra["egress"] = nlohmann::json{{"allow", "not-a-list"}};
    return OkStatus();
  }).ok());
  testing::Outcome o = Run({"egress", "dev"});
  EXPECT_NE(o.code, 0);
  EXPECT_NE(o.err.find("--reset"), std::string::npos) << o.err;
  EXPECT_EQ(Run({"egress", "dev", "--reset"}).code, 0);
  EXPECT_EQ(Stored(), proxy::EgressPolicy{});
}

}  // namespace
}  // namespace cloister::cli
