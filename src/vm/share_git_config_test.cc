// Host git's configuration read for a read-write share (vm/share_git_config.h), with real git on
// real repositories: what it names in the share is pinned or guarded, reading it runs nothing,
// and what cannot be read or protected refuses the boot.
#include "vm/share_git_config.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "base/subprocess.h"

namespace cloister::vm {
namespace {

namespace fs = std::filesystem;

void Write(const std::string& path, const std::string& content) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path) << content;
}

void Git(const std::string& dir, const std::vector<std::string>& args) {
  std::vector<std::string> argv = {"git", "-C", dir};
  argv.insert(argv.end(), args.begin(), args.end());
  RunOptions o;
  o.env_set = {{"GIT_CONFIG_NOSYSTEM", "1"}, {"GIT_CONFIG_GLOBAL", "/dev/null"}};
  auto r = RunProcessChecked(argv, o);
  ASSERT_TRUE(r.ok()) << r.error().ToString();
}

class ShareGitConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char t[] = "/tmp/cloister-gitcfg.XXXXXX";
    ASSERT_NE(mkdtemp(t), nullptr);
    root_ = fs::canonical(t).string();
    share_ = root_ + "/proj";
    home_ = root_ + "/home";
    fs::create_directories(share_);
    fs::create_directories(home_);
    ASSERT_NO_FATAL_FAILURE(Git(share_, {"init", "-q", "."}));
    auto git = FindHostGit();
    ASSERT_TRUE(git.has_value());
    scope_.git = *git;
    scope_.homes = {{home_, ""}};
  }
  void TearDown() override { fs::remove_all(root_); }

  // The protection of `share_` (read-write), after the walk.
  Result<GitConfigProtection> Protect(const std::vector<std::string>& more_ro = {}) {
    int fd = open(share_.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
    auto scan = ScanShare(share_, fd);
    if (!scan.ok()) {
      close(fd);
      return scan.error();
    }
    std::vector<GitConfigShare> shares = {{share_, fd, false, &*scan}};
    std::vector<int> others;
    for (const std::string& ro : more_ro) {
      others.push_back(open(ro.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
      shares.push_back({ro, others.back(), true, nullptr});
    }
    auto r = ProtectGitConfigPaths(shares, scope_);
    close(fd);
    for (int o : others) close(o);
    if (!r.ok()) return r.error();
    EXPECT_EQ(r->size(), shares.size());
    for (size_t i = 1; i < r->size(); ++i) EXPECT_TRUE((*r)[i].guarded.empty());
    return (*r)[0];
  }

  static bool Pinned(const GitConfigProtection& p, const std::string& rel, bool dir) {
    return std::any_of(p.targets.begin(), p.targets.end(), [&](const ShareMountTarget& t) {
      return t.relative == rel && t.directory == dir && t.read_only;
    });
  }
  static bool Guarded(const GitConfigProtection& p, const std::string& rel) {
    return std::find(p.guarded.begin(), p.guarded.end(), rel) != p.guarded.end();
  }

  std::string root_, share_, home_;
  GitConfigScope scope_;
};

TEST_F(ShareGitConfigTest, HooksPathInTheWorkingTreeIsPinnedOrGuarded) {
  ASSERT_NO_FATAL_FAILURE(Git(share_, {"config", "core.hooksPath", ".husky/_"}));
  auto missing = Protect();
  ASSERT_TRUE(missing.ok()) << missing.error().ToString();
  EXPECT_TRUE(Guarded(*missing, ".husky/_"));
  EXPECT_TRUE(missing->targets.empty());
  Write(share_ + "/.husky/_/pre-commit", "#!/bin/sh\n");
  auto present = Protect();
  ASSERT_TRUE(present.ok()) << present.error().ToString();
  EXPECT_TRUE(Pinned(*present, ".husky/_", true));
  EXPECT_TRUE(Guarded(*present, ".husky/_"));
  EXPECT_FALSE(Guarded(*present, ".husky"));  // the way there is guarded as a path, not pinned
}

TEST_F(ShareGitConfigTest, IncludesAreFollowedWhateverTheirConditionAndTheirCommandsNamed) {
  ASSERT_NO_FATAL_FAILURE(Git(share_, {"config", "include.path", "../.gitconfig-shared"}));
  ASSERT_NO_FATAL_FAILURE(Git(share_, {"config", "includeIf.onbranch:never/*.path", "../.gitconfig-branch"}));
  ASSERT_NO_FATAL_FAILURE(Git(share_, {"config", "include.path", "../.gitconfig-missing", "--add"}));
  Write(share_ + "/.gitconfig-shared", "[core]\n\tfsmonitor = tools/fsm.sh\n");
  Write(share_ + "/.gitconfig-branch", "[diff \"x\"]\n\ttextconv = sh conv.sh\n");
  Write(share_ + "/tools/fsm.sh", "#!/bin/sh\n");
  Write(share_ + "/conv.sh", "#!/bin/sh\n");
  auto p = Protect();
  ASSERT_TRUE(p.ok()) << p.error().ToString();
  EXPECT_TRUE(Pinned(*p, ".gitconfig-shared", false));
  EXPECT_TRUE(Pinned(*p, ".gitconfig-branch", false));
  EXPECT_TRUE(Guarded(*p, ".gitconfig-missing"));
  EXPECT_TRUE(Pinned(*p, "tools/fsm.sh", false));
  EXPECT_TRUE(Pinned(*p, "conv.sh", false));
  // The repository's own config is the walk's (already read-only): not pinned twice.
  EXPECT_FALSE(Pinned(*p, ".git/config", false));
}

TEST_F(ShareGitConfigTest, TheUsersGlobalConfigurationCounts) {
  Write(home_ + "/.gitconfig", "[include]\n\tpath = " + share_ + "/team.gitconfig\n[core]\n\thooksPath = .hooks\n");
  Write(share_ + "/team.gitconfig", "[filter \"f\"]\n\tclean = ~/bin/clean\n");
  auto p = Protect();
  ASSERT_TRUE(p.ok()) << p.error().ToString();
  EXPECT_TRUE(Pinned(*p, "team.gitconfig", false));
  EXPECT_TRUE(Guarded(*p, ".hooks"));  // relative: against each repository's working tree
}

TEST_F(ShareGitConfigTest, AShareHoldingAHomeGuardsItsGlobalFiles) {
  share_ = home_;  // the whole home shared: ~/.gitconfig would be the guest's to write
  ASSERT_NO_FATAL_FAILURE(Git(share_, {"init", "-q", "."}));
  auto p = Protect();
  ASSERT_TRUE(p.ok()) << p.error().ToString();
  EXPECT_TRUE(Guarded(*p, ".gitconfig"));
  EXPECT_TRUE(Guarded(*p, ".config/git/config"));
}

TEST_F(ShareGitConfigTest, TheRepositoryAShareLiesInCounts) {
  ASSERT_NO_FATAL_FAILURE(Git(share_, {"config", "core.hooksPath", "frontend/.husky/_"}));
  std::string top = share_;
  share_ = top + "/frontend";
  fs::create_directories(share_ + "/.husky/_");
  auto p = Protect();
  ASSERT_TRUE(p.ok()) << p.error().ToString();
  EXPECT_TRUE(Pinned(*p, ".husky/_", true));
}

TEST_F(ShareGitConfigTest, NestedAndBareRepositoriesAndSymlinksOutsideTheShare) {
  fs::create_directories(share_ + "/vendor/lib");
  ASSERT_NO_FATAL_FAILURE(Git(share_ + "/vendor/lib", {"init", "-q", "."}));
  ASSERT_NO_FATAL_FAILURE(Git(share_ + "/vendor/lib", {"config", "core.fsmonitor", "./watch.pl"}));
  ASSERT_NO_FATAL_FAILURE(Git(share_, {"init", "-q", "--bare", "fixtures/bare.git"}));
  ASSERT_NO_FATAL_FAILURE(Git(share_ + "/fixtures/bare.git", {"config", "core.hooksPath", "myhooks"}));
  fs::create_symlink(share_, root_ + "/link-to-proj");  // the user's own symlink, outside the share
  ASSERT_NO_FATAL_FAILURE(Git(share_, {"config", "core.sshCommand", root_ + "/link-to-proj/bin/ssh"}));
  auto p = Protect();
  ASSERT_TRUE(p.ok()) << p.error().ToString();
  EXPECT_TRUE(Guarded(*p, "vendor/lib/watch.pl"));
  EXPECT_TRUE(Guarded(*p, "fixtures/bare.git/myhooks"));  // a bare repository's hooks: its git dir
  EXPECT_TRUE(Guarded(*p, "bin/ssh"));
}

TEST_F(ShareGitConfigTest, AStaleGitfileIsNoRepository) {
  Write(share_ + "/wt/.git", "gitdir: " + root_ + "/gone\n");  // host git fails there: nothing runs
  auto p = Protect();
  EXPECT_TRUE(p.ok()) << p.error().ToString();
}

TEST_F(ShareGitConfigTest, WhatCannotBeProtectedRefusesTheBoot) {
  ASSERT_NO_FATAL_FAILURE(Git(share_, {"config", "core.fsmonitor", "tools/fsm.sh"}));
  fs::create_directories(share_ + "/elsewhere");
  fs::create_symlink("elsewhere", share_ + "/tools");  // a symlink inside the share
  auto link = Protect();
  ASSERT_FALSE(link.ok());
  EXPECT_NE(link.error().message().find("tools/fsm.sh"), std::string::npos) << link.error().ToString();
  EXPECT_NE(link.error().hint().find(":ro"), std::string::npos);
  fs::remove(share_ + "/tools");
  Write(share_ + "/tools/fsm.sh", "#!/bin/sh\n");
  fs::create_hard_link(share_ + "/tools/fsm.sh", share_ + "/other-name");
  auto hard = Protect();
  ASSERT_FALSE(hard.ok());
  EXPECT_NE(hard.error().message().find("hard links"), std::string::npos) << hard.error().ToString();
  fs::remove(share_ + "/other-name");
  ASSERT_NO_FATAL_FAILURE(Git(share_, {"config", "core.hooksPath", "."}));
  auto itself = Protect();
  ASSERT_FALSE(itself.ok());
  EXPECT_NE(itself.error().message().find("names the folder itself"), std::string::npos) << itself.error().ToString();
  ASSERT_NO_FATAL_FAILURE(Git(share_, {"config", "--unset", "core.hooksPath"}));
  EXPECT_TRUE(Protect().ok());
  scope_.git.clear();  // no git on the host
  auto no_git = Protect();
  ASSERT_FALSE(no_git.ok());
  EXPECT_NE(no_git.error().message().find("no git"), std::string::npos) << no_git.error().ToString();
}

TEST_F(ShareGitConfigTest, AConfigurationGitCannotReadRefusesTheBoot) {
  ASSERT_NO_FATAL_FAILURE(Git(share_, {"config", "include.path", "../broken.gitconfig"}));
  Write(share_ + "/broken.gitconfig", "[core\n\tfsmonitor = x\n");
  auto p = Protect();
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.error().message().find("broken.gitconfig"), std::string::npos) << p.error().ToString();
  // A FIFO where an include points is not opened (git would block on it).
  fs::remove(share_ + "/broken.gitconfig");
  ASSERT_EQ(mkfifo((share_ + "/broken.gitconfig").c_str(), 0644), 0);
  auto fifo = Protect();
  ASSERT_FALSE(fifo.ok());  // and it is no file the jail can pin
  EXPECT_NE(fifo.error().message().find("neither a file nor a directory"), std::string::npos) << fifo.error().ToString();
}

// Reading the configuration runs none of the programs it names.
TEST_F(ShareGitConfigTest, ReadingTheConfigurationRunsNothing) {
  const std::string canary = root_ + "/ran";
  const std::string cmd = "touch " + canary;
  Write(root_ + "/run.sh", "#!/bin/sh\ntouch " + canary + "\n");
  chmod((root_ + "/run.sh").c_str(), 0755);
  for (const char* key : {"core.fsmonitor", "core.pager", "pager.config", "core.editor", "core.sshCommand",
                          "core.askPass", "credential.helper", "gpg.program", "core.alternateRefsCommand"}) {
    ASSERT_NO_FATAL_FAILURE(Git(share_, {"config", key, root_ + "/run.sh"}));
  }
  ASSERT_NO_FATAL_FAILURE(Git(share_, {"config", "core.hooksPath", root_}));
  for (const char* hook : {"post-index-change", "reference-transaction", "post-checkout"}) {
    Write(root_ + "/" + hook, "#!/bin/sh\n" + cmd + "\n");
    chmod((root_ + "/" + hook).c_str(), 0755);
  }
  Write(share_ + "/.gitattributes", "* filter=f diff=d\n");
  ASSERT_NO_FATAL_FAILURE(Git(share_, {"config", "filter.f.clean", root_ + "/run.sh"}));
  ASSERT_NO_FATAL_FAILURE(Git(share_, {"config", "diff.d.textconv", root_ + "/run.sh"}));
  auto p = Protect();
  ASSERT_TRUE(p.ok()) << p.error().ToString();
  EXPECT_FALSE(fs::exists(canary));
}

}  // namespace
}  // namespace cloister::vm
