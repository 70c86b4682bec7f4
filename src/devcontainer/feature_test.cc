#include "devcontainer/feature.h"

#include <gtest/gtest.h>

#include "devcontainer/feature_ref.h"

namespace cloister::devcontainer {
namespace {

TEST(FeatureRefTest, Forms) {
  auto r = ParseFeatureRef("GHCR.io/DevContainers/features/Go:1.2");
  ASSERT_TRUE(r.ok()) << r.error().message();
  EXPECT_FALSE(r->local());
  EXPECT_EQ(r->registry, "ghcr.io");
  EXPECT_EQ(r->repository, "devcontainers/features/go");
  EXPECT_EQ(r->tag, "1.2");
  EXPECT_EQ(r->Resource(), "ghcr.io/devcontainers/features/go");
  EXPECT_EQ(r->Id(), "go");
  EXPECT_EQ(r->Reference(), "ghcr.io/devcontainers/features/go:1.2");

  auto latest = ParseFeatureRef("localhost:5000/team/tool");
  ASSERT_TRUE(latest.ok()) << latest.error().message();
  EXPECT_EQ(latest->registry, "localhost:5000");
  EXPECT_EQ(latest->tag, "latest");

  std::string digest = "sha256:" + std::string(64, 'a');
  auto pinned = ParseFeatureRef("ghcr.io/x/y@" + digest);
  ASSERT_TRUE(pinned.ok()) << pinned.error().message();
  EXPECT_EQ(pinned->digest, digest);
  EXPECT_EQ(pinned->tag, "");
  EXPECT_EQ(pinned->Reference(), "ghcr.io/x/y@" + digest);

  auto local = ParseFeatureRef("./My-Tool/");
  ASSERT_TRUE(local.ok());
  EXPECT_TRUE(local->local());
  EXPECT_EQ(local->path, "./My-Tool");  // a path keeps its case
  EXPECT_EQ(local->Id(), "My-Tool");
  EXPECT_TRUE(ParseFeatureRef("../shared/tool").ok());
}

TEST(FeatureRefTest, Refusals) {
  for (const char* bad : {"", "go", "/abs/tool", "https://example.com/f.tgz", "ghcr.io/only",
                          "notaregistry/ns/name", "ghcr.io/x/y@sha256:short", "ghcr.io/x/y:1@sha256:" ,
                          "ghcr.io/x/-y", "ghcr.io/x/y:-1", ".//x", "ghcr.io/x/y\n", "ghcr.io/x\\y/z"}) {
    EXPECT_FALSE(ParseFeatureRef(bad).ok()) << bad;
  }
  EXPECT_FALSE(ParseFeatureRef(std::string(600, 'a')).ok());
}

TEST(FeatureOptionsTest, EnvironmentNamesFollowTheSpec) {
  EXPECT_EQ(OptionEnvName("version"), "VERSION");
  EXPECT_EQ(OptionEnvName("installTools"), "INSTALLTOOLS");
  EXPECT_EQ(OptionEnvName("go-version"), "GO_VERSION");
  EXPECT_EQ(OptionEnvName("a.b c"), "A_B_C");
  EXPECT_EQ(OptionEnvName("2fa"), "_FA");      // a leading digit run becomes one '_'
  EXPECT_EQ(OptionEnvName("__x"), "_X");
  EXPECT_EQ(OptionEnvName("-x"), "_X");        // '-' becomes '_' first, then the leading run
  EXPECT_EQ(OptionEnvName("12_3abc"), "_ABC");
  EXPECT_EQ(OptionEnvName("caf\xC3\xA9"), "CAF_");        // one UTF-16 unit: one '_'
  EXPECT_EQ(OptionEnvName("x\xF0\x9F\x98\x80"), "X__");  // a surrogate pair: two
}

constexpr char kFeature[] = R"({
  // a local Feature
  "id": "greeter",
  "version": "1.0.0",
  "name": "Greeter",
  "options": {
    "greeting": {"type": "string", "default": "hi", "proposals": ["hi", "hello"]},
    "loud": {"type": "boolean", "default": false},
    "flavor": {"type": "string", "enum": ["a", "b"], "default": "a"},
    "no-default": {"type": "string"},
  },
  "containerEnv": {"GREETER_HOME": "/opt/greeter"},
  "installsAfter": ["ghcr.io/devcontainers/features/common-utils"],
  "dependsOn": {"ghcr.io/x/base:1": {"level": "2"}},
  "entrypoint": "/usr/local/bin/start",
  "postCreateCommand": "greet --init",
})";

TEST(FeatureMetadataTest, Parses) {
  auto f = ParseFeatureMetadata(kFeature,
                                "./greeter/devcontainer-feature.json");
  ASSERT_TRUE(f.ok()) << f.error().message();
  EXPECT_EQ(f->id, "greeter");
  EXPECT_EQ(f->version, "1.0.0");
  ASSERT_EQ(f->options.size(), 4u);
  EXPECT_EQ(f->container_env.at("GREETER_HOME"), "/opt/greeter");
  EXPECT_EQ(f->installs_after, std::vector<std::string>{"ghcr.io/devcontainers/features/common-utils"});
  ASSERT_EQ(f->depends_on.size(), 1u);
  EXPECT_EQ(f->depends_on[0].second, (FeatureOptions{{"level", "2"}}));
  ASSERT_EQ(f->lifecycle.count("postCreateCommand"), 1u);
  ASSERT_EQ(f->notices.size(), 1u);
  EXPECT_EQ(f->notices[0].key, "entrypoint");
  EXPECT_EQ(f->notices[0].line, 15);
}

TEST(FeatureMetadataTest, Refusals) {
  EXPECT_FALSE(ParseFeatureMetadata(R"({"version": "1"})", "f").ok());  // no id
  EXPECT_FALSE(ParseFeatureMetadata(R"({"id": "x", "options": {"o": {"type": "number"}}})", "f").ok());
  EXPECT_FALSE(ParseFeatureMetadata(R"({"id": "x", "options": {"a-b": {}, "a_b": {}}})", "f").ok());
  EXPECT_FALSE(ParseFeatureMetadata(R"({"id": "x", "dependsOn": {"ghcr.io/x/y:1": {"n": 2}}})", "f").ok());
  EXPECT_FALSE(ParseFeatureMetadata(R"({"id": "x", "dependsOn": {"go": {}}})", "f").ok());
  EXPECT_FALSE(ParseFeatureMetadata(R"({"id": "x", "installsAfter": "y"})", "f").ok());
  EXPECT_FALSE(ParseFeatureMetadata(R"({"id": "x", "postCreateCommand": 3})", "f").ok());
}

FeatureUsers Dev() { return {"dev", "/home/dev"}; }

TEST(FeatureOptionsTest, DefaultsUserValuesAndBuiltins) {
  auto f = ParseFeatureMetadata(kFeature, "f");
  ASSERT_TRUE(f.ok()) << f.error().message();
  auto env = FeatureEnvironment(*f, {{"greeting", "hello world"}, {"loud", "true"}, {"extra-opt", "x"}}, Dev());
  ASSERT_TRUE(env.ok()) << env.error().message();
  EXPECT_EQ(*env, (std::map<std::string, std::string>{{"GREETING", "hello world"},
                                                      {"LOUD", "true"},
                                                      {"FLAVOR", "a"},  // the default
                                                      {"NO_DEFAULT", ""},
                                                      {"EXTRA_OPT", "x"},  // passed through
                                                      {"_REMOTE_USER", "dev"},
                                                      {"_REMOTE_USER_HOME", "/home/dev"},
                                                      {"_CONTAINER_USER", "root"},
                                                      {"_CONTAINER_USER_HOME", "/root"}}));
  // The `version` shorthand and a boolean option from the file.
  auto opts = ParseFeatureOptions(nlohmann::json("1.22"), "f");
  ASSERT_TRUE(opts.ok());
  EXPECT_EQ(*opts, (FeatureOptions{{"version", "1.22"}}));
  auto b = ParseFeatureOptions(nlohmann::json{{"loud", false}}, "f");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->at("loud"), "false");
}

TEST(FeatureOptionsTest, EnumAndBooleanAreEnforced) {
  auto f = ParseFeatureMetadata(kFeature, "f");
  ASSERT_TRUE(f.ok());
  auto e = FeatureEnvironment(*f, {{"flavor", "c"}}, Dev());
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.error().hint().find("a, b"), std::string::npos);
  EXPECT_FALSE(FeatureEnvironment(*f, {{"loud", "yes"}}, Dev()).ok());
  // A user option that maps onto a declared option's variable, or onto a built-in.
  EXPECT_FALSE(FeatureEnvironment(*f, {{"Greeting", "x"}}, Dev()).ok());
  FeatureMetadata m;
  m.id = "m";
  EXPECT_FALSE(FeatureEnvironment(m, {{"_remote-user", "x"}}, Dev()).ok());
  EXPECT_FALSE(FeatureEnvironment(m, {{"1", "x"}}, Dev()).ok());
}

}  // namespace
}  // namespace cloister::devcontainer
