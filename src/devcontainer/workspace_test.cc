#include "devcontainer/workspace.h"

#include <gtest/gtest.h>

namespace cloister::devcontainer {
namespace {

Config Parsed(const std::string& text) {
  auto c = ParseConfig(text, "devcontainer.json");
  EXPECT_TRUE(c.ok()) << c.error().message();
  return c.ok() ? *c : Config{};
}

TEST(WorkspaceDevcontainerTest, FeaturesFirstThenTheFileInStageOrder) {
  Config c = Parsed(R"({"image": "x", "remoteUser": "root",
    "containerEnv": {"A": "from-file", "EDITOR": "vi"},
    "postStartCommand": "echo start", "postCreateCommand": ["make"], "onCreateCommand": "echo on"})");
  FeatureMetadata f1, f2;
  f1.id = "one";
  f1.container_env = {{"A", "from-feature"}, {"TOOL_HOME", "/opt/one"}, {"PATH", "/opt/one/bin:${PATH}"}};
  f1.lifecycle["postCreateCommand"] = *ParseLifecycleCommand(nlohmann::json("one-setup"), "k");
  f2.id = "two";
  f2.container_env = {{"PATH", "/opt/two/bin:$PATH"}, {"TWO", "${TOOL_HOME}/two"}};
  f2.lifecycle["onCreateCommand"] = *ParseLifecycleCommand(nlohmann::json("two-on"), "k");
  auto w = MakeWorkspaceDevcontainer(c, {{"./one", &f1}, {"ghcr.io/x/two:1", &f2}},
                                     "/repo/.devcontainer/devcontainer.json", "ab12", "dc-repo");
  ASSERT_TRUE(w.ok()) << w.error().message();
  EXPECT_EQ(w->env.at("A"), "from-file");  // devcontainer.json wins
  EXPECT_EQ(w->env.at("PATH"),
            "/opt/two/bin:/opt/one/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin");
  EXPECT_EQ(w->env.at("TWO"), "/opt/one/two");
  EXPECT_EQ(w->remote_user, "root");
  std::vector<std::string> order;
  for (const WorkspaceStep& s : w->steps) order.push_back(s.stage + " " + s.origin);
  EXPECT_EQ(order, (std::vector<std::string>{
                       "onCreateCommand Feature ghcr.io/x/two:1", "onCreateCommand devcontainer.json",
                       "postCreateCommand Feature ./one", "postCreateCommand devcontainer.json",
                       "postStartCommand devcontainer.json"}));
  nlohmann::json g = GuestLifecycleJson(*w);
  EXPECT_EQ(g["user"], "root");
  EXPECT_EQ(g["create"].size(), 4u);
  EXPECT_EQ(g["start"].size(), 1u);
  EXPECT_EQ(g["start"][0]["commands"][0]["shell"], "echo start");
  EXPECT_EQ(g["create"][3]["commands"][0]["argv"], nlohmann::json({"make"}));
  EXPECT_EQ(g["create_id"].get<std::string>().size(), 64u);
  // The create id names the create steps only: a new postStartCommand keeps it.
  WorkspaceDevcontainer other = *w;
  other.steps.back().command = *ParseLifecycleCommand(nlohmann::json("echo other"), "k");
  EXPECT_EQ(GuestLifecycleJson(other)["create_id"], g["create_id"]);
  other.steps.front().command = *ParseLifecycleCommand(nlohmann::json("echo other"), "k");
  EXPECT_NE(GuestLifecycleJson(other)["create_id"], g["create_id"]);
}

TEST(WorkspaceDevcontainerTest, AFeaturesCredentialIsRefusedToo) {
  Config c = Parsed(R"({"image": "x"})");
  FeatureMetadata f;
  f.id = "leaky";
  f.container_env = {{"GITHUB_TOKEN_X", "ghp_" + std::string(36, 'z')}};
  auto w = MakeWorkspaceDevcontainer(c, {{"./leaky", &f}}, "/r/d.json", "", "");
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.error().code(), ErrorCode::kPermissionDenied);
  f.container_env = {{"X", "${X:-default}"}};
  EXPECT_FALSE(MakeWorkspaceDevcontainer(c, {{"./f", &f}}, "/r/d.json", "", "").ok());
}

TEST(WorkspaceDevcontainerTest, SectionRoundTripsAndIsCheckedWhenRead) {
  Config c = Parsed(R"({"image": "x", "containerEnv": {"EDITOR": "vi"}, "postCreateCommand": "make"})");
  auto w = MakeWorkspaceDevcontainer(c, {}, "/r/.devcontainer/devcontainer.json", "ab", "dc-r");
  ASSERT_TRUE(w.ok()) << w.error().message();
  WorkspaceConfig config;
  ASSERT_TRUE(PutConfigSection(WorkspaceDevcontainerSection(), config, *w).ok());
  auto back = WorkspaceDevcontainerFromConfig(config);
  ASSERT_TRUE(back.ok()) << back.error().message();
  EXPECT_EQ(*back, *w);
  // A key put into the stored section by hand is refused when it is read (the boot fails closed).
  config.extra[kWorkspaceKey]["env"]["AWS_X"] = "AKIAIOSFODNN7EXAMPLE";
  auto tampered = WorkspaceDevcontainerFromConfig(config);
  ASSERT_FALSE(tampered.ok());
  EXPECT_EQ(tampered.error().code(), ErrorCode::kPermissionDenied);
  config.extra[kWorkspaceKey]["env"] = nlohmann::json::object();
  config.extra[kWorkspaceKey]["steps"][0]["stage"] = "initializeCommand";
  EXPECT_FALSE(WorkspaceDevcontainerFromConfig(config).ok());
  // No section: empty.
  auto none = WorkspaceDevcontainerFromConfig(WorkspaceConfig{});
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->source.empty());
}

}  // namespace
}  // namespace cloister::devcontainer
