#include "devcontainer/feature_order.h"

#include <gtest/gtest.h>

namespace cloister::devcontainer {
namespace {

// A registry of Features: reference (without tag) -> metadata; the digest is the resource and tag.
struct FakeRegistry {
  std::map<std::string, FeatureMetadata> features;
  int calls = 0;

  FeatureMetadata& Add(const std::string& resource) {
    FeatureMetadata& m = features[resource];
    m.id = resource.substr(resource.rfind('/') + 1);
    return m;
  }
  FeatureResolver Resolver() {
    return [this](const FeatureRef& r) -> Result<ResolvedFeature> {
      ++calls;
      auto it = features.find(r.Resource());
      if (it == features.end()) return Error(ErrorCode::kNotFound, "no Feature " + r.written);
      ResolvedFeature f;
      f.metadata = it->second;
      f.canonical = r.local() ? r.path : "sha256:" + r.Resource() + "@" + r.tag;
      f.digest = f.canonical;
      return f;
    };
  }
};

std::vector<std::pair<FeatureRef, FeatureOptions>> User(
    const std::vector<std::pair<std::string, FeatureOptions>>& refs) {
  std::vector<std::pair<FeatureRef, FeatureOptions>> out;
  for (const auto& [r, o] : refs) {
    auto ref = ParseFeatureRef(r);
    EXPECT_TRUE(ref.ok()) << r;
    out.emplace_back(*ref, o);
  }
  return out;
}

// The install order as the references written.
Result<std::vector<std::string>> Order(FakeRegistry& reg,
                                       const std::vector<std::pair<std::string, FeatureOptions>>& refs,
                                       const std::vector<std::string>& override_order = {}) {
  ASSIGN_OR_RETURN(auto nodes, ResolveFeatureGraph(User(refs), reg.Resolver()));
  ASSIGN_OR_RETURN(auto order, InstallOrder(nodes, override_order));
  std::vector<std::string> out;
  for (size_t i : order) {
    std::string s = nodes[i].ref.written;
    for (const auto& [k, v] : nodes[i].options) s += " " + k + "=" + v;
    out.push_back(s);
  }
  return out;
}

using V = std::vector<std::string>;

TEST(FeatureOrderTest, WithoutConstraintsByResourceName) {
  FakeRegistry reg;
  reg.Add("ghcr.io/x/b");
  reg.Add("ghcr.io/x/a");
  reg.Add("./local");
  auto o = Order(reg, {{"ghcr.io/x/b:1", {}}, {"ghcr.io/x/a:1", {}}, {"./local", {}}});
  ASSERT_TRUE(o.ok()) << o.error().message();
  EXPECT_EQ(*o, (V{"./local", "ghcr.io/x/a:1", "ghcr.io/x/b:1"}));
}

TEST(FeatureOrderTest, InstallsAfterOnlyAmongQueuedFeatures) {
  FakeRegistry reg;
  reg.Add("ghcr.io/x/a").installs_after = {"ghcr.io/x/b", "ghcr.io/x/not-queued"};
  reg.Add("ghcr.io/x/b");
  auto o = Order(reg, {{"ghcr.io/x/a", {}}, {"ghcr.io/x/b:2", {}}});
  ASSERT_TRUE(o.ok()) << o.error().message();
  EXPECT_EQ(*o, (V{"ghcr.io/x/b:2", "ghcr.io/x/a"}));
  // installsAfter never adds a Feature.
  auto alone = Order(reg, {{"ghcr.io/x/a", {}}});
  ASSERT_TRUE(alone.ok());
  EXPECT_EQ(*alone, (V{"ghcr.io/x/a"}));
}

TEST(FeatureOrderTest, DependsOnIsRecursiveAndEqualFeaturesInstallOnce) {
  FakeRegistry reg;
  reg.Add("ghcr.io/x/app").depends_on = {{"ghcr.io/x/lib:1", {}}, {"ghcr.io/x/util:1", {{"v", "2"}}}};
  reg.Add("ghcr.io/x/lib").depends_on = {{"ghcr.io/x/util:1", {{"v", "2"}}}};
  reg.Add("ghcr.io/x/util");
  auto o = Order(reg, {{"ghcr.io/x/app:1", {}}, {"ghcr.io/x/util:1", {{"v", "2"}}}});
  ASSERT_TRUE(o.ok()) << o.error().message();
  EXPECT_EQ(*o, (V{"ghcr.io/x/util:1 v=2", "ghcr.io/x/lib:1", "ghcr.io/x/app:1"}));
  // The same Feature with other options is another Feature.
  reg.features["ghcr.io/x/lib"].depends_on = {{"ghcr.io/x/util:1", {{"v", "3"}}}};
  auto two = Order(reg, {{"ghcr.io/x/app:1", {}}});
  ASSERT_TRUE(two.ok()) << two.error().message();
  EXPECT_EQ(two->size(), 4u);
}

TEST(FeatureOrderTest, OverridePullsForwardButNeverBeforeDependencies) {
  FakeRegistry reg;
  reg.Add("ghcr.io/x/a");
  reg.Add("ghcr.io/x/b");
  reg.Add("ghcr.io/x/c").depends_on = {{"ghcr.io/x/a:1", {}}};
  reg.Add("./z");
  auto o = Order(reg, {{"ghcr.io/x/a:1", {}}, {"ghcr.io/x/b:1", {}}, {"ghcr.io/x/c:1", {}}, {"./z", {}}},
                 {"ghcr.io/x/c", "ghcr.io/x/b:1", "./z"});
  ASSERT_TRUE(o.ok()) << o.error().message();
  // Round 1: a, b, z are ready; b (priority 2) and z (1) beat a (0): b alone. Then z, then a
  // (priority 0, ready), and c (priority 3) only once a is in.
  EXPECT_EQ(*o, (V{"ghcr.io/x/b:1", "./z", "ghcr.io/x/a:1", "ghcr.io/x/c:1"}));
  auto unknown = Order(reg, {{"ghcr.io/x/a:1", {}}}, {"ghcr.io/x/nope"});
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.error().message().find("ghcr.io/x/nope"), std::string::npos);
}

TEST(FeatureOrderTest, RoundStableSortTagsThenOptions) {
  FakeRegistry reg;
  reg.Add("ghcr.io/x/a");
  reg.Add("ghcr.io/x/app").depends_on = {{"ghcr.io/x/a:1.10", {}}, {"ghcr.io/x/a:latest", {}},
                                         {"ghcr.io/x/a:1.9", {}}};
  auto o = Order(reg, {{"ghcr.io/x/app", {}}, {"ghcr.io/x/a:1.9", {{"p", "1"}}}});
  ASSERT_TRUE(o.ok()) << o.error().message();
  EXPECT_EQ(*o, (V{"ghcr.io/x/a:1.9 p=1", "ghcr.io/x/a:1.9", "ghcr.io/x/a:1.10",
                   "ghcr.io/x/a:latest", "ghcr.io/x/app"}));
}

TEST(FeatureOrderTest, CyclesAndLocalDependenciesAreRefused) {
  FakeRegistry reg;
  reg.Add("ghcr.io/x/a").installs_after = {"ghcr.io/x/b"};
  reg.Add("ghcr.io/x/b").installs_after = {"ghcr.io/x/a"};
  auto cycle = Order(reg, {{"ghcr.io/x/a", {}}, {"ghcr.io/x/b", {}}});
  ASSERT_FALSE(cycle.ok());
  EXPECT_NE(cycle.error().message().find("cycle"), std::string::npos);
  reg.Add("ghcr.io/x/d").depends_on = {{"ghcr.io/x/e", {}}};
  reg.Add("ghcr.io/x/e").depends_on = {{"ghcr.io/x/d", {}}};
  auto hard = Order(reg, {{"ghcr.io/x/d", {}}});
  ASSERT_FALSE(hard.ok());
  EXPECT_NE(hard.error().message().find("cycle"), std::string::npos);
  reg.Add("ghcr.io/x/f").depends_on = {{"./local", {}}};
  auto local = Order(reg, {{"ghcr.io/x/f", {}}});
  ASSERT_FALSE(local.ok());
  EXPECT_NE(local.error().message().find("local Feature"), std::string::npos);
  auto missing = Order(reg, {{"ghcr.io/x/missing", {}}});
  EXPECT_FALSE(missing.ok());
}

TEST(FeatureOrderTest, LegacyIdsNameARenamedFeature) {
  FakeRegistry reg;
  reg.Add("ghcr.io/x/new-name").legacy_ids = {"old-name"};
  reg.Add("ghcr.io/x/a").installs_after = {"ghcr.io/x/old-name"};
  auto o = Order(reg, {{"ghcr.io/x/a", {}}, {"ghcr.io/x/new-name", {}}});
  ASSERT_TRUE(o.ok()) << o.error().message();
  EXPECT_EQ(*o, (V{"ghcr.io/x/new-name", "ghcr.io/x/a"}));
}

TEST(FeatureOrderTest, GraphIsBounded) {
  FakeRegistry reg;
  // Each Feature depends on the next one: a chain longer than kMaxFeatures.
  for (size_t i = 0; i <= kMaxFeatures + 1; ++i) {
    reg.Add("ghcr.io/x/f" + std::to_string(i)).depends_on = {
        {"ghcr.io/x/f" + std::to_string(i + 1), {}}};
  }
  auto o = Order(reg, {{"ghcr.io/x/f0", {}}});
  ASSERT_FALSE(o.ok());
  EXPECT_NE(o.error().message().find("more than"), std::string::npos);
}

}  // namespace
}  // namespace cloister::devcontainer
