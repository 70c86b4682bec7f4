#include "devcontainer/repo.h"

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "base/testing_file.h"

namespace cloister::devcontainer {
namespace {

namespace fs = std::filesystem;

class RepoTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/cloister-repo-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    base_ = tmpl;
    repo_ = base_ / "repo";
    fs::create_directories(repo_ / ".git");
    fs::create_directories(repo_ / ".devcontainer" / "feature");
    fs::create_directories(repo_ / "src" / "deep");
    Write(repo_ / ".devcontainer" / "devcontainer.json", R"({"image": "x"})");
    Write(repo_ / ".devcontainer" / "Dockerfile", "FROM scratch\n");
    Write(repo_ / ".devcontainer" / "feature" / "install.sh", "#!/bin/sh\necho hi\n");
    fs::permissions(repo_ / ".devcontainer" / "feature" / "install.sh", fs::perms::owner_all);
    Write(repo_ / ".devcontainer" / "feature" / "devcontainer-feature.json", R"({"id": "feature"})");
    Write(base_ / "secret.txt", "host secret\n");
  }
  void TearDown() override { fs::remove_all(base_); }

  static void Write(const fs::path& p, const std::string& text) {
    std::ofstream(p, std::ios::binary) << text;
  }

  fs::path base_;
  fs::path repo_;
};

TEST_F(RepoTest, FindsTheDefaultFilesAndTheRoot) {
  auto loc = FindDevcontainer("", (repo_ / "src" / "deep").string());
  ASSERT_TRUE(loc.ok()) << loc.error().message();
  EXPECT_EQ(loc->root, repo_.string());
  EXPECT_EQ(loc->file, ".devcontainer/devcontainer.json");
  EXPECT_EQ(loc->Dir(), ".devcontainer");

  fs::remove(repo_ / ".devcontainer" / "devcontainer.json");
  Write(repo_ / ".devcontainer.json", "{}");
  loc = FindDevcontainer(repo_.string(), "/");
  ASSERT_TRUE(loc.ok()) << loc.error().message();
  EXPECT_EQ(loc->file, ".devcontainer.json");
  EXPECT_EQ(loc->Dir(), "");

  // A file given explicitly, by a path relative to the current directory.
  loc = FindDevcontainer(".devcontainer/Dockerfile", repo_.string());
  ASSERT_TRUE(loc.ok()) << loc.error().message();
  EXPECT_EQ(loc->file, ".devcontainer/Dockerfile");

  fs::remove(repo_ / ".devcontainer.json");
  auto none = FindDevcontainer("", repo_.string());
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.error().code(), ErrorCode::kNotFound);
}

TEST_F(RepoTest, WithoutGitTheDevcontainerFoldersParentIsTheRoot) {
  fs::remove_all(repo_ / ".git");
  auto loc = FindDevcontainer((repo_ / ".devcontainer" / "devcontainer.json").string(), "/");
  ASSERT_TRUE(loc.ok()) << loc.error().message();
  EXPECT_EQ(loc->root, repo_.string());
}

TEST(JoinBeneathTest, StaysInsideTheRoot) {
  EXPECT_EQ(*JoinBeneath(".devcontainer", "Dockerfile"), ".devcontainer/Dockerfile");
  EXPECT_EQ(*JoinBeneath(".devcontainer", ".."), ".");
  EXPECT_EQ(*JoinBeneath(".devcontainer", "../src/./x/"), "src/x");
  EXPECT_EQ(*JoinBeneath("", "a//b"), "a/b");
  auto up = JoinBeneath(".devcontainer", "../..");
  ASSERT_FALSE(up.ok());
  EXPECT_EQ(up.error().code(), ErrorCode::kPermissionDenied);
  EXPECT_FALSE(JoinBeneath(".devcontainer", "../../repo/x").ok());
  EXPECT_FALSE(JoinBeneath(".devcontainer", "/etc/passwd").ok());
}

TEST_F(RepoTest, ReadsBeneathAndRefusesSymlinksThatLeave) {
  auto repo = RepoDir::Open(repo_.string());
  ASSERT_TRUE(repo.ok());
  auto text = repo->ReadFile(".devcontainer/Dockerfile", 1024);
  ASSERT_TRUE(text.ok()) << text.error().message();
  EXPECT_EQ(*text, "FROM scratch\n");
  // A symlink inside the repository to a file inside it is followed.
  fs::create_symlink("Dockerfile", repo_ / ".devcontainer" / "Dockerfile.link");
  EXPECT_TRUE(repo->ReadFile(".devcontainer/Dockerfile.link", 1024).ok());
  // Out by an absolute symlink, a relative one, or a symlinked folder: refused.
  fs::create_symlink(base_ / "secret.txt", repo_ / ".devcontainer" / "abs");
  fs::create_symlink("../../secret.txt", repo_ / ".devcontainer" / "rel");
  fs::create_symlink(base_, repo_ / "outside");
  for (const char* p : {".devcontainer/abs", ".devcontainer/rel", "outside/secret.txt"}) {
    auto r = repo->ReadFile(p, 1024);
    ASSERT_FALSE(r.ok()) << p;
    EXPECT_EQ(r.error().code(), ErrorCode::kPermissionDenied) << p << ": " << r.error().message();
  }
  EXPECT_FALSE(repo->ReadFile("../secret.txt", 1024).ok());
  EXPECT_FALSE(repo->ReadFile(".devcontainer/Dockerfile", 4).ok());  // bounded
  EXPECT_FALSE(repo->ReadFile(".devcontainer", 1024).ok());          // not a file
  EXPECT_FALSE(repo->OpenDirectory("outside").ok());
}

TEST_F(RepoTest, CopyTreeCopiesWithoutFollowingSymlinksAndDigests) {
  auto repo = RepoDir::Open(repo_.string());
  ASSERT_TRUE(repo.ok());
  fs::create_symlink(base_ / "secret.txt", repo_ / ".devcontainer" / "feature" / "leak");
  fs::path dest = base_ / "copy";
  auto d = repo->CopyTree(".devcontainer/feature", dest.string());
  ASSERT_TRUE(d.ok()) << d.error().message();
  EXPECT_EQ(d->entries, 3u);
  EXPECT_EQ(testfile::Slurp(dest / "install.sh"), "#!/bin/sh\necho hi\n");
  EXPECT_TRUE((fs::status(dest / "install.sh").permissions() & fs::perms::owner_exec) != fs::perms::none);
  EXPECT_TRUE((fs::status(dest / "devcontainer-feature.json").permissions() & fs::perms::owner_exec) ==
              fs::perms::none);
  // The symlink is copied as a symlink: its target's bytes were never read.
  EXPECT_TRUE(fs::is_symlink(dest / "leak"));
  EXPECT_EQ(fs::read_symlink(dest / "leak"), base_ / "secret.txt");
  // The digest is the contents', stable, and changes with a byte.
  auto again = repo->DigestTree(".devcontainer/feature");
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->sha256, d->sha256);
  Write(repo_ / ".devcontainer" / "feature" / "install.sh", "#!/bin/sh\necho ho\n");
  auto changed = repo->DigestTree(".devcontainer/feature");
  ASSERT_TRUE(changed.ok());
  EXPECT_NE(changed->sha256, d->sha256);
}

TEST_F(RepoTest, CopyTreeIsBoundedAndRefusesOtherKinds) {
  auto repo = RepoDir::Open(repo_.string());
  ASSERT_TRUE(repo.ok());
  CopyLimits small;
  small.max_bytes = 8;
  EXPECT_FALSE(repo->DigestTree(".devcontainer/feature", small).ok());
  small = {};
  small.max_entries = 1;
  EXPECT_FALSE(repo->DigestTree(".devcontainer/feature", small).ok());
  ASSERT_EQ(mkfifo((repo_ / ".devcontainer" / "feature" / "fifo").c_str(), 0600), 0);
  auto fifo = repo->DigestTree(".devcontainer/feature");
  ASSERT_FALSE(fifo.ok());
  EXPECT_NE(fifo.error().message().find("fifo"), std::string::npos);
}

}  // namespace
}  // namespace cloister::devcontainer
