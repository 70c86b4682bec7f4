#include "image/oci/build_plan.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace cloister::image::oci {
namespace {

namespace fs = std::filesystem;

class BuildPlanTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "/build_plan_" + std::to_string(getpid());
    fs::remove_all(dir_);
    fs::create_directories(dir_ + "/layout");
    std::ofstream(dir_ + "/layout/index.json") << "{}";
    std::ofstream(dir_ + "/a.tar") << "x";
    fs::create_directories(dir_ + "/feature");
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string dir_;
};

TEST_F(BuildPlanTest, ParsesEveryTransport) {
  auto r = ParseSourceRef("docker://alpine:3.19", dir_);
  ASSERT_TRUE(r.ok()) << r.error().ToString();
  EXPECT_EQ(r->kind, SourceKind::kRegistry);
  EXPECT_EQ(r->location, "alpine:3.19");
  EXPECT_EQ(r->ref, "docker://alpine:3.19");
  for (const char* ok : {"docker://registry.test:5000/team/app@sha256:"
                         "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
                         "docker://localhost/x", "docker://debian", "docker://a/b_c/d-e:v1.2_3"}) {
    EXPECT_TRUE(ParseSourceRef(ok, dir_).ok()) << ok;
  }
  r = ParseSourceRef("oci-archive:a.tar", dir_);
  ASSERT_TRUE(r.ok()) << r.error().ToString();
  EXPECT_EQ(r->kind, SourceKind::kOciArchive);
  EXPECT_EQ(r->location, dir_ + "/a.tar");
  r = ParseSourceRef("docker-archive:" + dir_ + "/a.tar", "/");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->kind, SourceKind::kDockerArchive);
  r = ParseSourceRef("oci:layout", dir_);
  ASSERT_TRUE(r.ok()) << r.error().ToString();
  EXPECT_EQ(r->kind, SourceKind::kOciDir);
  EXPECT_EQ(r->location, dir_ + "/layout");
  EXPECT_EQ(r->oci_ref, "");
  r = ParseSourceRef("oci:layout:v1", dir_);
  ASSERT_TRUE(r.ok()) << r.error().ToString();
  EXPECT_EQ(r->location, dir_ + "/layout");
  EXPECT_EQ(r->oci_ref, "v1");
}

TEST_F(BuildPlanTest, RefusesBadRefsWithTheForms) {
  struct Case {
    const char* ref;
    const char* says;
  } cases[] = {
      {"podman://x", "unknown transport \"podman\""},
      {"alpine:3", "unknown transport \"alpine\""},
      {"alpine", "no transport"},
      {"docker://", "no image name"},
      {"docker://Alpine", "malformed"},
      {"docker://alpine:bad tag", "tag"},
      {"docker://alpine@sha256:abc", "digest"},
      {"oci-archive:missing.tar", "is not a file"},
      {"oci-archive:", "no archive path"},
      {"oci:feature", "not an OCI image layout"},
  };
  for (const auto& c : cases) {
    auto r = ParseSourceRef(c.ref, dir_);
    ASSERT_FALSE(r.ok()) << c.ref;
    EXPECT_EQ(r.error().code(), ErrorCode::kInvalidArgument) << c.ref;
    EXPECT_NE(r.error().message().find(c.says), std::string::npos)
        << c.ref << ": " << r.error().message();
    EXPECT_NE(r.error().hint().find("docker://NAME"), std::string::npos) << c.ref;
  }
}

TEST_F(BuildPlanTest, ValidatesPlans) {
  BuildPlan p;
  p.name = "my-env";
  p.source = *ParseSourceRef("oci-archive:a.tar", dir_);
  Step s;
  s.name = "feature ./feature";
  s.dir = dir_ + "/feature";
  s.command = "./install.sh";
  s.env = {{"VERSION", "1.2"}};
  p.steps.push_back(s);
  EXPECT_TRUE(ValidatePlan(p).ok()) << ValidatePlan(p).error().ToString();

  BuildPlan bad = p;
  bad.name = "Bad Name";
  EXPECT_FALSE(ValidatePlan(bad).ok());
  bad = p;
  bad.steps[0].env["1X"] = "v";
  EXPECT_FALSE(ValidatePlan(bad).ok());
  bad = p;
  bad.steps[0].dir = dir_ + "/nope";
  EXPECT_FALSE(ValidatePlan(bad).ok());
  bad = p;
  bad.steps[0].command.clear();
  EXPECT_FALSE(ValidatePlan(bad).ok());
  bad = p;
  bad.steps.assign(kMaxSteps + 1, s);
  EXPECT_FALSE(ValidatePlan(bad).ok());
  bad = p;
  bad.registry_credential = "reg";
  EXPECT_FALSE(ValidatePlan(bad).ok());
  bad = p;
  bad.source.kind = SourceKind::kDockerfile;
  bad.source.dockerfile.dockerfile = dir_ + "/Dockerfile";
  bad.source.dockerfile.context = dir_;
  EXPECT_FALSE(ValidatePlan(bad).ok());  // no Dockerfile there
  std::ofstream(dir_ + "/Dockerfile") << "FROM base:1\n";
  bad.source.dockerfile.base_images.push_back({"base:1", "oci-archive:" + dir_ + "/a.tar"});
  EXPECT_TRUE(ValidatePlan(bad).ok()) << ValidatePlan(bad).error().ToString();
  bad.source.dockerfile.base_images.push_back({"Bad Name", "oci-archive:" + dir_ + "/a.tar"});
  EXPECT_FALSE(ValidatePlan(bad).ok());
}

TEST_F(BuildPlanTest, DigestFollowsInputsNotTheName) {
  BuildPlan p;
  p.name = "a";
  p.source = *ParseSourceRef("docker://alpine:3.19", dir_);
  BuildPlan q = p;
  q.name = "b";
  EXPECT_EQ(PlanDigest(p), PlanDigest(q));
  EXPECT_EQ(PlanDigest(p).size(), 64u);
  q.steps.push_back({"s", "", "true", {}, ""});
  EXPECT_NE(PlanDigest(p), PlanDigest(q));
  BuildPlan r = p;
  r.devcontainer_sha256 = "00";
  EXPECT_NE(PlanDigest(p), PlanDigest(r));
  BuildPlan i = p;
  i.inputs_sha256 = "00";
  EXPECT_NE(PlanDigest(p), PlanDigest(i));
  // Field boundaries are length-prefixed: moving bytes between fields changes the digest.
  BuildPlan s1 = p, s2 = p;
  s1.steps.push_back({"ab", "", "c", {}, ""});
  s2.steps.push_back({"a", "", "bc", {}, ""});
  EXPECT_NE(PlanDigest(s1), PlanDigest(s2));
}

}  // namespace
}  // namespace cloister::image::oci
