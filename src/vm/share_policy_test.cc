#include "vm/share_policy.h"

#include <cerrno>
#include <string>

#include <gtest/gtest.h>

namespace cloister::vm {
namespace {

struct Case {
  std::string name;
  NewNameContext where;
  int want;
};

TEST(SharePolicyTest, NoGitDirCanBeMadeOutsideThePinnedOnes) {
  const NewNameContext plain{}, beside_head{false, false, true}, in_git{true, false, false},
      git_top{true, true, false};
  const Case cases[] = {
      {"src", plain, 0},
      {"config", plain, 0},  // a file named config is nothing to git outside a git dir
      {"objects", plain, 0},
      {"HEAD.txt", plain, 0},
      {".gitignore", plain, 0},
      {".git", plain, EPERM},
      {".GIT", plain, EPERM},
      {".Git", in_git, EPERM},
      {"HEAD", plain, EPERM},
      {"head", plain, EPERM},
      {"objects", beside_head, EPERM},
      {"refs", beside_head, EPERM},
      {"CommonDir", beside_head, EPERM},
      {"src", beside_head, 0},
      {"HEAD", in_git, 0},  // HEAD.lock renamed onto HEAD
      {"config", in_git, 0},  // refs/heads/config, a branch
      {"objects", in_git, 0},
      {"config", git_top, EPERM},
      {"config.worktree", git_top, EPERM},
      {"commondir", git_top, EPERM},
      {"HOOKS", git_top, EPERM},
      {"info", git_top, EPERM},
      {"modules", git_top, EPERM},
      {"worktrees", git_top, EPERM},
      {"config.lock", git_top, 0},
      {"index.lock", git_top, 0},
      {"HEAD", git_top, 0},
      {"", plain, EPERM},
      {".", plain, EPERM},
      {"..", in_git, EPERM},
      {"a/b", plain, EPERM},
      {std::string("a\0b", 3), plain, EPERM},
      {std::string(256, 'x'), plain, EPERM},
      {std::string(255, 'x'), plain, 0},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(CheckNewNameWith(c.name, c.where), c.want)
        << "'" << c.name << "' in_git=" << c.where.in_git_dir << " top=" << c.where.git_dir_top
        << " head=" << c.where.holds_head;
  }
}

TEST(SharePolicyTest, LooksForAHeadOnlyWhenTheNameNeedsIt) {
  int asked = 0;
  auto head = [&] {
    ++asked;
    return true;
  };
  EXPECT_EQ(CheckNewName("src", NewNameContext{}, head), 0);
  EXPECT_EQ(asked, 0);
  EXPECT_EQ(CheckNewName("refs", NewNameContext{}, head), EPERM);
  EXPECT_EQ(asked, 1);
  EXPECT_EQ(CheckNewName("refs", NewNameContext{true, false, false}, head), 0);  // inside a git dir
  EXPECT_EQ(asked, 1);
}

}  // namespace
}  // namespace cloister::vm
