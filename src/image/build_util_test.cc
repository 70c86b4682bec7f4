#include "image/build_util.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>

#include "catalog/sha256.h"
#include "image/testing.h"

namespace cloister::image {
namespace {

namespace fs = std::filesystem;

using testing::TempDir;

TEST(BuildUtilTest, DeterministicUuidIsStableAndShaped) {
  std::string a = DeterministicUuid("cloister-image/test/uuid");
  EXPECT_EQ(a, DeterministicUuid("cloister-image/test/uuid"));
  EXPECT_NE(a, DeterministicUuid("cloister-image/test/hash"));
  ASSERT_EQ(a.size(), 36u);
  EXPECT_EQ(a[8], '-');
  EXPECT_EQ(a[14], '4');
  EXPECT_NE(std::string("89ab").find(a[19]), std::string::npos);
}

TEST(BuildUtilTest, NormalizeMtimesSetsEveryEntryIncludingSymlinks) {
  TempDir t;
  ASSERT_TRUE(MakeDirs(t.path() + "/a/b").ok());
  ASSERT_TRUE(WriteFile(t.path() + "/a/b/f", "x").ok());
  ASSERT_EQ(symlink("/nonexistent", (t.path() + "/a/l").c_str()), 0);
  ASSERT_TRUE(NormalizeMtimes(t.path(), 1234567).ok());
  for (const char* rel : {"", "/a", "/a/b", "/a/b/f", "/a/l"}) {
    struct stat st;
    ASSERT_EQ(lstat((t.path() + rel).c_str(), &st), 0);
    EXPECT_EQ(st.st_mtime, 1234567) << rel;
  }
}

// Two trees with the same content but different ctimes and creation order give byte-identical
// ext4 images and cpio archives: what makes image builds reproducible.
TEST(BuildUtilTest, Ext4AndCpioAreReproducible) {
  TempDir t;
  std::string r1 = t.path() + "/r1", r2 = t.path() + "/r2";
  ASSERT_TRUE(MakeDirs(r1 + "/etc").ok());
  ASSERT_TRUE(WriteFile(r1 + "/etc/a", "alpha").ok());
  ASSERT_TRUE(WriteFile(r1 + "/etc/b", "beta", 0600).ok());
  ASSERT_TRUE(MakeDirs(r2 + "/etc").ok());
  ASSERT_TRUE(WriteFile(r2 + "/etc/b", "beta", 0600).ok());  // created in the other order
  ASSERT_TRUE(WriteFile(r2 + "/etc/a", "alpha").ok());
  ASSERT_TRUE(NormalizeMtimes(r1, kSourceDateEpoch).ok());
  ASSERT_TRUE(NormalizeMtimes(r2, kSourceDateEpoch).ok());
  Ext4Options o{"t", DeterministicUuid("u"), DeterministicUuid("h"), 8 << 20};
  ASSERT_TRUE(MakeExt4(r1, t.path() + "/1.img", o).ok());
  ASSERT_TRUE(MakeExt4(r2, t.path() + "/2.img", o).ok());
  auto d1 = catalog::Sha256File(t.path() + "/1.img");
  auto d2 = catalog::Sha256File(t.path() + "/2.img");
  ASSERT_TRUE(d1.ok() && d2.ok());
  EXPECT_EQ(d1->size, 8u << 20);
  EXPECT_EQ(d1->sha256, d2->sha256);
  // A different UUID must change the image (the option is really applied).
  Ext4Options o2 = o;
  o2.uuid = DeterministicUuid("other");
  ASSERT_TRUE(MakeExt4(r1, t.path() + "/3.img", o2).ok());
  EXPECT_NE(catalog::Sha256File(t.path() + "/3.img")->sha256, d1->sha256);

  ASSERT_TRUE(MakeCpio(r1, t.path() + "/1.cpio", kSourceDateEpoch).ok());
  ASSERT_TRUE(MakeCpio(r2, t.path() + "/2.cpio", kSourceDateEpoch).ok());
  auto c1 = catalog::Sha256File(t.path() + "/1.cpio");
  EXPECT_GT(c1->size, 0u);
  EXPECT_EQ(c1->sha256, catalog::Sha256File(t.path() + "/2.cpio")->sha256);
}

TEST(BuildUtilTest, PostInstallStepGetsRootAsFirstArgumentAndFailsLoudly) {
  TempDir t;
  std::vector<catalog::PostInstallStep> ok{{"touch", "echo hi > \"$1/marker\""}};
  ASSERT_TRUE(RunPostInstall(ok, t.path()).ok());
  EXPECT_TRUE(fs::exists(t.path() + "/marker"));
  std::vector<catalog::PostInstallStep> bad{{"broken", "false\necho unreachable > \"$1/x\""}};
  auto s = RunPostInstall(bad, t.path());
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message().find("broken"), std::string::npos);
  EXPECT_FALSE(fs::exists(t.path() + "/x"));
}

}  // namespace
}  // namespace cloister::image
