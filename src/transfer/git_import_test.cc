// ImportBundle against real git: a guest-made bundle lands as refs/heads/cloister/NAME/BRANCH;
// a bundle with a reference beyond the one asked for is refused whole; hooks and fsmonitor
// planted in the host repository (what a read-write share could plant) and configuration planted
// in the guest's repository run nothing on the host.
#include "transfer/git_import.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace cloister::transfer {
namespace {

namespace fs = std::filesystem;

class GitImportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/cloister-git-import-XXXXXX";
    dir_ = mkdtemp(tmpl);
    marker_ = dir_ + "/ran";
    guest_ = dir_ + "/guest";
    host_ = dir_ + "/host";
    // The guest's repository, with configuration a hostile guest plants.
    Git(dir_, {"init", "-q", "-b", "main", guest_});
    Write(guest_ + "/f.txt", "from the guest\n");
    Git(guest_, {"add", "f.txt"});
    Git(guest_, {"commit", "-q", "-m", "guest work"});
    Git(guest_, {"branch", "evil"});
    Git(guest_, {"config", "core.fsmonitor", "touch " + marker_});
    Git(guest_, {"config", "filter.x.smudge", "touch " + marker_});
    Write(guest_ + "/.gitattributes", "* filter=x\n");
    // The host's repository, with hooks and an fsmonitor planted in it.
    Git(dir_, {"init", "-q", "-b", "main", host_});
    Write(host_ + "/README", "host\n");
    Git(host_, {"add", "README"});
    Git(host_, {"commit", "-q", "-m", "host"});
    for (const char* hook : {"reference-transaction", "post-merge", "post-checkout",
                             "pre-auto-gc", "fsmonitor-watchman"}) {
      std::string path = host_ + "/.git/hooks/" + hook;
      Write(path, "#!/bin/sh\ntouch " + marker_ + "\n");
      chmod(path.c_str(), 0755);
    }
    Git(host_, {"config", "core.fsmonitor", "touch " + marker_});
  }
  void TearDown() override { fs::remove_all(dir_); }

  // The test's own git, hooks off (it stands for the guest's git making the bundle).
  void Git(const std::string& cwd, std::vector<std::string> args) {
    std::vector<std::string> argv = {"git", "-c", "core.hooksPath=/dev/null", "-c",
                                     "core.fsmonitor=false", "-c", "user.name=t", "-c",
                                     "user.email=t@example.test", "-C", cwd};
    argv.insert(argv.end(), args.begin(), args.end());
    auto r = RunProcessChecked(argv);
    ASSERT_TRUE(r.ok()) << r.error().ToString();
  }
  static void Write(const std::string& path, const std::string& text) {
    std::ofstream(path) << text;
  }
  std::string Bundle(const std::vector<std::string>& refs) {
    std::string path = dir_ + "/b" + std::to_string(++bundles_) + ".bundle";
    std::vector<std::string> args = {"bundle", "create", "-q", path};
    args.insert(args.end(), refs.begin(), refs.end());
    Git(guest_, args);
    return path;
  }
  bool HostHas(const std::string& ref) {
    auto r = HostGit(host_, {"rev-parse", "--verify", "-q", ref});
    return r.ok() && r->success();
  }

  std::string dir_, marker_, guest_, host_;
  int bundles_ = 0;
};

// SECURITY: the planted hooks, fsmonitor and filters run nothing on the host.
TEST_F(GitImportTest, GuestCommitsLandOnTheCloisterBranchAndNothingRuns) {
  auto got = ImportBundle({host_, Bundle({"refs/heads/main"}), "dev", "main"});
  ASSERT_TRUE(got.ok()) << got.error().ToString();
  EXPECT_EQ(got->ref, "refs/heads/cloister/dev/main");
  EXPECT_TRUE(HostHas("refs/heads/cloister/dev/main"));
  auto log = HostGit(host_, {"log", "--format=%s", "-1", "cloister/dev/main"});
  ASSERT_TRUE(log.ok());
  EXPECT_EQ(log->out, "guest work\n");
  // A second pull of newer work moves the branch (the guest's history may be rewritten).
  Git(guest_, {"commit", "-q", "--amend", "-m", "guest work, amended"});
  ASSERT_TRUE(ImportBundle({host_, Bundle({"refs/heads/main"}), "dev", "main"}).ok());
  EXPECT_FALSE(fs::exists(marker_)) << "host git ran something the guest or a share planted";
  EXPECT_FALSE(HostHas("refs/heads/evil"));
}

// SECURITY: a bundle carrying a reference outside the request is refused, and nothing lands.
TEST_F(GitImportTest, ABundleWithAnotherRefIsRefused) {
  auto got = ImportBundle({host_, Bundle({"refs/heads/main", "refs/heads/evil"}), "dev", "main"});
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.error().code(), ErrorCode::kPermissionDenied) << got.error().ToString();
  EXPECT_FALSE(HostHas("refs/heads/cloister/dev/main"));
  EXPECT_FALSE(HostHas("refs/heads/evil"));
  // Asking for a branch the bundle lacks, or a name git refuses, fails too.
  EXPECT_FALSE(ImportBundle({host_, Bundle({"refs/heads/evil"}), "dev", "main"}).ok());
  EXPECT_FALSE(ImportBundle({host_, Bundle({"refs/heads/main"}), "dev", "ma..in"}).ok());
}

TEST_F(GitImportTest, GarbageIsRefusedBeforeGitSeesIt) {
  std::string path = dir_ + "/junk.bundle";
  Write(path, "# v2 git bundle\nnot a header\n\n");
  auto got = ImportBundle({host_, path, "dev", "main"});
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.error().code(), ErrorCode::kCorrupt);
  // A well-formed header over a broken pack: git bundle verify refuses it.
  std::string good = Bundle({"refs/heads/main"});
  std::ifstream in(good, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), {});
  bytes.resize(bytes.size() - 30);
  Write(path, bytes);
  EXPECT_FALSE(ImportBundle({host_, path, "dev", "main"}).ok());
  EXPECT_FALSE(HostHas("refs/heads/cloister/dev/main"));
}

}  // namespace
}  // namespace cloister::transfer
