#include "devcontainer/config.h"

#include <gtest/gtest.h>

namespace cloister::devcontainer {
namespace {

constexpr char kFull[] = R"(// The repository's environment
{
  "name": "demo",
  "build": {
    "dockerfile": "Dockerfile",
    "context": "..",
    "args": {"VARIANT": "12"},
    "target": "dev",
    "cacheFrom": "x",
  },
  "features": {
    "ghcr.io/devcontainers/features/go:1": {"version": "1.22"},
    "./local-tool": {"greeting": "hello", "loud": true},
    "ghcr.io/devcontainers/features/node": "20",
  },
  "overrideFeatureInstallOrder": ["./local-tool"],
  "containerEnv": {"GOFLAGS": "-mod=mod", "EDITOR": "vi"},
  "remoteUser": "dev",
  "forwardPorts": [3000, "localhost:8080", 3000, 80],
  "onCreateCommand": "make deps",
  "updateContentCommand": ["npm", "ci"],
  "postCreateCommand": {"a": "echo a", "b": ["echo", "b"]},
  "postStartCommand": "echo started",
  "customizations": {"vscode": {"extensions": ["golang.go"]}},
  "initializeCommand": "rm -rf ~",
  "runArgs": ["--privileged"],
  "myOwnKey": 1,
}
)";

TEST(ConfigTest, EveryAppliedKeyForm) {
  auto c = ParseConfig(kFull, "devcontainer.json");
  ASSERT_TRUE(c.ok()) << c.error().message();
  EXPECT_EQ(c->name, "demo");
  EXPECT_TRUE(c->image.empty());
  ASSERT_TRUE(c->build);
  EXPECT_EQ(c->build->dockerfile, "Dockerfile");
  EXPECT_EQ(c->build->context, "..");
  EXPECT_EQ(c->build->args, (std::map<std::string, std::string>{{"VARIANT", "12"}}));
  EXPECT_EQ(c->build->target, "dev");
  ASSERT_EQ(c->features.size(), 3u);  // in the file's order, not nlohmann's
  EXPECT_EQ(c->features[0].ref.repository, "devcontainers/features/go");
  EXPECT_EQ(c->features[0].ref.tag, "1");
  EXPECT_EQ(c->features[0].options, (FeatureOptions{{"version", "1.22"}}));
  EXPECT_TRUE(c->features[1].ref.local());
  EXPECT_EQ(c->features[1].options, (FeatureOptions{{"greeting", "hello"}, {"loud", "true"}}));
  EXPECT_EQ(c->features[1].line, 13);
  EXPECT_EQ(c->features[2].ref.tag, "latest");
  EXPECT_EQ(c->features[2].options, (FeatureOptions{{"version", "20"}}));  // the shorthand
  EXPECT_EQ(c->override_feature_install_order, std::vector<std::string>{"./local-tool"});
  EXPECT_EQ(c->container_env.at("GOFLAGS"), "-mod=mod");
  EXPECT_EQ(c->remote_user, "dev");
  EXPECT_EQ(c->forward_ports, (std::vector<uint16_t>{3000, 8080, 80}));
  ASSERT_EQ(c->lifecycle.size(), 4u);
  EXPECT_EQ(c->lifecycle.at("onCreateCommand").commands[0].shell, "make deps");
  EXPECT_FALSE(c->lifecycle.at("onCreateCommand").parallel);
  EXPECT_EQ(c->lifecycle.at("updateContentCommand").commands[0].argv,
            (std::vector<std::string>{"npm", "ci"}));
  const LifecycleCommand& pc = c->lifecycle.at("postCreateCommand");
  EXPECT_TRUE(pc.parallel);
  ASSERT_EQ(pc.commands.size(), 2u);
  EXPECT_EQ(pc.commands[0].name, "a");
  EXPECT_EQ(pc.commands[1].argv, (std::vector<std::string>{"echo", "b"}));
  EXPECT_EQ(c->lifecycle.at("postStartCommand").commands[0].shell, "echo started");
}

TEST(ConfigTest, KeysNotAppliedAreReportedOnceWithTheirLine) {
  auto c = ParseConfig(kFull, "devcontainer.json");
  ASSERT_TRUE(c.ok()) << c.error().message();
  std::map<std::string, int> seen;
  for (const Notice& n : c->notices) seen[n.key]++;
  EXPECT_EQ(seen, (std::map<std::string, int>{{"build.cacheFrom", 1},
                                              {"customizations", 1},
                                              {"initializeCommand", 1},
                                              {"myOwnKey", 1},
                                              {"runArgs", 1}}));
  for (const Notice& n : c->notices) {
    EXPECT_GT(n.line, 0) << n.key;
    if (n.key == "initializeCommand") {
      EXPECT_EQ(n.line, 25);
      EXPECT_NE(n.why.find("runs no repository code on the host"), std::string::npos);
      EXPECT_EQ(n.ToString().rfind("devcontainer.json:25: \"initializeCommand\": not run", 0), 0u)
          << n.ToString();
    }
    if (n.key == "myOwnKey") {
      EXPECT_NE(n.why.find("not a devcontainer.json key"), std::string::npos);
    }
  }
}

TEST(ConfigTest, ImageFormAndOlderDockerFileSpelling) {
  auto c = ParseConfig(R"({"image": "debian:12"})", "f");
  ASSERT_TRUE(c.ok()) << c.error().message();
  EXPECT_EQ(c->image, "debian:12");
  EXPECT_FALSE(c->build);
  auto old = ParseConfig(R"({"dockerFile": "Dockerfile", "context": ".."})", "f");
  ASSERT_TRUE(old.ok()) << old.error().message();
  EXPECT_EQ(old->build->dockerfile, "Dockerfile");
  EXPECT_EQ(old->build->context, "..");
  auto defaults = ParseConfig(R"({"build": {"dockerfile": "D"}})", "f");
  ASSERT_TRUE(defaults.ok());
  EXPECT_EQ(defaults->build->context, ".");
}

void ExpectError(const std::string& text, const std::string& fragment, int line = -1) {
  auto c = ParseConfig(text, "devcontainer.json");
  ASSERT_FALSE(c.ok()) << text;
  EXPECT_NE(c.error().message().find(fragment), std::string::npos) << c.error().message();
  if (line > 0) {
    EXPECT_EQ(c.error().message().rfind("devcontainer.json:" + std::to_string(line) + ":", 0), 0u)
        << c.error().message();
  }
}

TEST(ConfigTest, MalformedConfigsNameTheLine) {
  ExpectError("{}", "neither \"image\" nor");
  ExpectError(R"({"image": "a", "build": {"dockerfile": "D"}})", "both");
  ExpectError(R"({"build": {"context": "."}})", "no \"dockerfile\"");
  ExpectError("{\n\"dockerComposeFile\": \"c.yml\", \"service\": \"app\"}", "Compose", 2);
  ExpectError("{\"image\": \"a\",\n\"forwardPorts\": [\n3000,\n\"db:5432\"]}", "another container", 4);
  ExpectError("{\"image\": \"a\",\n\"forwardPorts\": [0]}", "not a port", 2);
  ExpectError("{\"image\": \"a\",\n\"forwardPorts\": [70000]}", "not a port");
  ExpectError("{\"image\": \"a\",\n\"forwardPorts\": 3000}", "not an array", 2);
  ExpectError("{\"image\": \"a\",\n\n\"postCreateCommand\": 5}", "postCreateCommand", 3);
  ExpectError("{\"image\": \"a\", \"postCreateCommand\": []}", "empty array");
  ExpectError("{\"image\": \"a\", \"postCreateCommand\": {\"x\": 1}}", "postCreateCommand.x");
  ExpectError("{\"image\": \"a\", \"onCreateCommand\": [\"ls\", 3]}", "not a string");
  ExpectError("{\"image\": \"a\",\n\"remoteUser\": \"-rf\"}", "remoteUser", 2);
  ExpectError("{\"image\": \"a\",\n\"features\": {\"go\": {}}}", "legacy Feature id", 2);
  ExpectError("{\"image\": \"a\", \"features\": {\"https://x/f.tgz\": {}}}", "tarball URL");
  ExpectError("{\"image\": \"a\", \"features\": {\"/abs\": {}}}", "absolute path");
  ExpectError("{\"image\": \"a\", \"features\": {\"./f\": 3}}", "options are an object");
  ExpectError("{\"image\": \"a\", \"features\": {\"./f\": {\"o\": 1}}}", "string or boolean");
  ExpectError("{\"build\": {\"dockerfile\": \"/etc/passwd\"}}", "absolute path");
  ExpectError("{\"image\": \"a\",\n\"containerEnv\": {\"A\": 1}}", "not a string", 2);
  ExpectError("{\"image\": \"a\", \"overrideFeatureInstallOrder\": \"x\"}", "not an array");
  ExpectError("[]", "not a JSON object");
}

TEST(ConfigTest, CredentialInContainerEnvIsRefusedWithItsLine) {
  std::string key = "ghp_" + std::string(36, 'a');
  auto c = ParseConfig("{\"image\": \"a\",\n\"containerEnv\": {\n\"EDITOR\": \"vi\",\n\"GH\": \"" + key +
                           "\"}}",
                       "devcontainer.json");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.error().code(), ErrorCode::kPermissionDenied);
  EXPECT_EQ(c.error().message().rfind("devcontainer.json:4:", 0), 0u) << c.error().message();
  EXPECT_NE(c.error().message().find("looks like a credential"), std::string::npos);
  EXPECT_EQ(c.error().message().find(key.substr(4)), std::string::npos);  // never the value
  EXPECT_NE(c.error().hint().find("cloister cred add"), std::string::npos);
}

TEST(ConfigTest, HostEnvironmentIsNeverSubstituted) {
  ExpectError(R"({"image": "a", "containerEnv": {"T": "${localEnv:GITHUB_TOKEN}"}})",
              "never copies the host's environment");
}

TEST(ConfigTest, LifecycleStoredFormRoundTrips) {
  auto c = ParseConfig(kFull, "f");
  ASSERT_TRUE(c.ok());
  for (const auto& [key, cmd] : c->lifecycle) {
    auto back = LifecycleFromJson(LifecycleToJson(cmd), key);
    ASSERT_TRUE(back.ok()) << back.error().message();
    EXPECT_EQ(*back, cmd) << key;
  }
  EXPECT_EQ(DescribeLifecycle(c->lifecycle.at("postCreateCommand")), "a: sh -c 'echo a'; b: echo b");
  // The stored form is checked like the file.
  EXPECT_FALSE(LifecycleFromJson(nlohmann::json{{"commands", {{{"argv", nlohmann::json::array()}}}}}, "k").ok());
  EXPECT_FALSE(LifecycleFromJson(
      nlohmann::json{{"parallel", false}, {"commands", {{{"shell", "a"}}, {{"shell", "b"}}}}}, "k").ok());
}

}  // namespace
}  // namespace cloister::devcontainer
