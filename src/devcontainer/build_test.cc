#include "devcontainer/build.h"

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "base/testing_file.h"

namespace cloister::devcontainer {
namespace {

namespace fs = std::filesystem;

class BuildTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/cloister-dc-build-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    base_ = tmpl;
    repo_ = base_ / "My Project";
    fs::create_directories(repo_ / ".git");
    fs::create_directories(repo_ / ".devcontainer" / "hello");
    fs::create_directories(repo_ / "src");
    Write(".devcontainer/Dockerfile", "FROM localbase:1\nRUN echo built > /built\n");
    Write(".devcontainer/hello/devcontainer-feature.json", R"({
      "id": "hello", "version": "1.0.0",
      "options": {"greeting": {"type": "string", "default": "hi"}},
      "containerEnv": {"HELLO_HOME": "/opt/hello", "PATH": "/opt/hello/bin:${PATH}"},
      "postCreateCommand": "hello --setup"})");
    Write(".devcontainer/hello/install.sh", "#!/bin/sh\necho \"$GREETING\" > /opt/greeting\n");
    Write("src/main.c", "int main(void) { return 0; }\n");
    Write("base.tar", "not really an archive, only bytes to hash");
    Devcontainer(R"({
      // the proof's shape
      "build": {"dockerfile": "Dockerfile", "context": "..", "args": {"V": "1"}},
      "features": {"./hello": {"greeting": "hello there"}},
      "containerEnv": {"EDITOR": "vi"},
      "remoteUser": "dev",
      "forwardPorts": [8080],
      "postCreateCommand": "echo created >> ~/created",
      "runArgs": ["--privileged"],
    })");
  }
  void TearDown() override { fs::remove_all(base_); }

  void Write(const std::string& rel, const std::string& text) {
    std::ofstream(repo_ / rel, std::ios::binary) << text;
  }
  void Devcontainer(const std::string& text) { Write(".devcontainer/devcontainer.json", text); }

  BuildRequest Request() {
    BuildRequest r;
    r.cwd = (repo_ / "src").string();
    r.staging = (base_ / "staging").string();
    auto b = ParseBaseFlag("localbase:1=oci-archive:../base.tar", r.cwd);
    EXPECT_TRUE(b.ok()) << b.error().message();
    if (b.ok()) r.base_images.push_back(*b);
    return r;
  }

  fs::path base_;
  fs::path repo_;
};

TEST_F(BuildTest, DockerfileFeatureAndWorkspaceSettings) {
  auto p = PrepareBuild(Request());
  ASSERT_TRUE(p.ok()) << p.error().ToString();
  EXPECT_EQ(p->location.root, repo_.string());
  EXPECT_EQ(p->plan.name, "dc-my-project");
  EXPECT_EQ(p->plan.devcontainer_sha256, p->sha256);
  const auto& src = p->plan.source;
  ASSERT_EQ(src.kind, image::oci::SourceKind::kDockerfile);
  EXPECT_EQ(src.dockerfile.dockerfile, (base_ / "staging" / "Dockerfile").string());
  EXPECT_EQ(testfile::Slurp(src.dockerfile.dockerfile), "FROM localbase:1\nRUN echo built > /built\n");
  // The context is the repository's root (".." from .devcontainer), copied.
  EXPECT_EQ(testfile::Slurp(fs::path(src.dockerfile.context) / "src" / "main.c"),
            "int main(void) { return 0; }\n");
  EXPECT_EQ(src.dockerfile.build_args.at("V"), "1");
  ASSERT_EQ(src.dockerfile.base_images.size(), 1u);
  EXPECT_EQ(src.dockerfile.base_images[0].ref, "oci-archive:" + (repo_ / "base.tar").string());
  ASSERT_EQ(p->plan.steps.size(), 1u);
  const auto& step = p->plan.steps[0];
  EXPECT_EQ(step.name, "feature ./hello");
  EXPECT_EQ(step.command, "chmod +x ./install.sh && ./install.sh");
  EXPECT_EQ(step.env.at("GREETING"), "hello there");
  EXPECT_EQ(step.env.at("_REMOTE_USER"), "dev");
  EXPECT_EQ(step.env.at("_REMOTE_USER_HOME"), "/home/dev");
  EXPECT_EQ(step.env.at("HELLO_HOME"), "/opt/hello");  // its own containerEnv applies to it
  EXPECT_EQ(step.digest.rfind("sha256:", 0), 0u);
  EXPECT_TRUE(fs::exists(fs::path(step.dir) / "install.sh"));
  const WorkspaceDevcontainer& w = p->workspace;
  EXPECT_EQ(w.image, "dc-my-project");
  EXPECT_EQ(w.env.at("EDITOR"), "vi");
  EXPECT_EQ(w.env.at("PATH").rfind("/opt/hello/bin:", 0), 0u);
  ASSERT_EQ(w.steps.size(), 2u);
  EXPECT_EQ(w.steps[0].origin, "Feature ./hello");
  EXPECT_EQ(w.steps[1].origin, ".devcontainer/devcontainer.json");
  EXPECT_EQ(p->config.forward_ports, std::vector<uint16_t>{8080});
  ASSERT_EQ(p->notices.size(), 1u);
  EXPECT_EQ(p->notices[0].key, "runArgs");
}

TEST_F(BuildTest, SameInputsSameDigestAndAnyByteChangesIt) {
  auto a = PrepareBuild(Request());
  ASSERT_TRUE(a.ok()) << a.error().ToString();
  fs::remove_all(base_ / "staging");
  auto b = PrepareBuild(Request());
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(a->inputs_digest, b->inputs_digest);
  for (const char* file : {"src/main.c", ".devcontainer/hello/install.sh", "base.tar",
                           ".devcontainer/Dockerfile"}) {
    Write(file, "changed");
    fs::remove_all(base_ / "staging");
    auto c = PrepareBuild(Request());
    ASSERT_TRUE(c.ok()) << file << ": " << c.error().ToString();
    EXPECT_NE(c->inputs_digest, a->inputs_digest) << file;
  }
}

TEST_F(BuildTest, PathsThatLeaveTheRepositoryAreRefused) {
  Write("../outside-Dockerfile", "FROM x\n");
  Devcontainer(R"({"build": {"dockerfile": "../../outside-Dockerfile"}})");
  auto up = PrepareBuild(Request());
  ASSERT_FALSE(up.ok());
  EXPECT_EQ(up.error().code(), ErrorCode::kPermissionDenied) << up.error().ToString();
  fs::remove_all(base_ / "staging");
  fs::create_symlink(base_ / "outside-Dockerfile", repo_ / ".devcontainer" / "linked");
  Devcontainer(R"({"build": {"dockerfile": "linked"}})");
  auto link = PrepareBuild(Request());
  ASSERT_FALSE(link.ok());
  EXPECT_EQ(link.error().code(), ErrorCode::kPermissionDenied) << link.error().ToString();
  fs::remove_all(base_ / "staging");
  fs::create_symlink(base_, repo_ / ".devcontainer" / "out");
  Devcontainer(R"({"build": {"dockerfile": "Dockerfile"}, "features": {"./out": {}}})");
  auto feature = PrepareBuild(Request());
  ASSERT_FALSE(feature.ok());
  EXPECT_EQ(feature.error().code(), ErrorCode::kPermissionDenied) << feature.error().ToString();
  fs::remove_all(base_ / "staging");
  Devcontainer(R"({"build": {"dockerfile": "Dockerfile", "context": "../.."}})");
  EXPECT_FALSE(PrepareBuild(Request()).ok());
}

TEST_F(BuildTest, TheContextsDockerignoreIsApplied) {
  fs::create_directories(repo_ / "node_modules" / "big");
  Write("node_modules/big/index.js", "module.exports = 1;\n");
  Write(".dockerignore", "node_modules\n*.log\n");
  Write("debug.log", "x");
  auto p = PrepareBuild(Request());
  ASSERT_TRUE(p.ok()) << p.error().ToString();
  fs::path ctx = p->plan.source.dockerfile.context;
  EXPECT_FALSE(fs::exists(ctx / "node_modules"));
  EXPECT_FALSE(fs::exists(ctx / "debug.log"));
  EXPECT_TRUE(fs::exists(ctx / "src" / "main.c"));
  // What is ignored does not move the digest; the .dockerignore itself does.
  std::string before = p->inputs_digest;
  Write("node_modules/big/index.js", "changed");
  fs::remove_all(base_ / "staging");
  auto same = PrepareBuild(Request());
  ASSERT_TRUE(same.ok());
  EXPECT_EQ(same->inputs_digest, before);
  Write(".dockerignore", "node_modules\n");
  fs::remove_all(base_ / "staging");
  auto other = PrepareBuild(Request());
  ASSERT_TRUE(other.ok());
  EXPECT_NE(other->inputs_digest, before);
}

TEST_F(BuildTest, SymlinksInTheContextAreCopiedNotFollowed) {
  fs::create_symlink(base_ / "secret", repo_ / "src" / "leak");
  std::ofstream(base_ / "secret") << "host secret";
  auto p = PrepareBuild(Request());
  ASSERT_TRUE(p.ok()) << p.error().ToString();
  fs::path copied = fs::path(p->plan.source.dockerfile.context) / "src" / "leak";
  EXPECT_TRUE(fs::is_symlink(copied));
}

TEST_F(BuildTest, ImageFormAndRegistryFeaturesAndNames) {
  Devcontainer(R"({"image": "debian:12", "features": {"ghcr.io/devcontainers/features/go:1": {}}})");
  BuildRequest r = Request();
  r.base_images.clear();
  auto oci = PrepareBuild(r);
  ASSERT_FALSE(oci.ok());
  EXPECT_NE(oci.error().hint().find("./FOLDER"), std::string::npos);
  fs::remove_all(base_ / "staging");
  Devcontainer(R"({"image": "debian:12"})");
  auto p = PrepareBuild(r);
  ASSERT_TRUE(p.ok()) << p.error().ToString();
  EXPECT_EQ(p->plan.source.kind, image::oci::SourceKind::kRegistry);
  EXPECT_EQ(p->plan.source.location, "debian:12");
  DevcontainerLocation loc{"/src/Web_App", ".devcontainer/python/devcontainer.json"};
  EXPECT_EQ(DefaultImageName(loc), "dc-web_app-python");
  EXPECT_FALSE(ParseBaseFlag("nobase", "/").ok());
  EXPECT_FALSE(ParseBaseFlag("x=unknown:thing", "/").ok());
}

}  // namespace
}  // namespace cloister::devcontainer
