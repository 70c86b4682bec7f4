#include "store/env.h"

#include <gtest/gtest.h>

#include "store/fault_injection_env.h"
#include "store/test_util.h"

namespace cloister {
namespace {

TEST(EnvTest, AtomicWriteReplacesAndLeavesNoTemp) {
  testing::TempDir dir;
  Env* env = Env::Default();
  ASSERT_TRUE(env->AtomicWriteFile(dir.Sub("f"), "one").ok());
  ASSERT_TRUE(env->AtomicWriteFile(dir.Sub("f"), "two").ok());
  EXPECT_EQ(*env->ReadFile(dir.Sub("f")), "two");
  EXPECT_FALSE(env->Exists(dir.Sub("f.tmp")));
}

TEST(EnvTest, StatReportsSparseAllocation) {
  testing::TempDir dir;
  Env* env = Env::Default();
  ASSERT_TRUE(env->Truncate(dir.Sub("sparse"), 1ull << 30).ok());
  FileInfo fi = *env->Stat(dir.Sub("sparse"));
  EXPECT_EQ(fi.apparent, 1ull << 30);
  EXPECT_LT(fi.allocated, 1u << 20);
}

// The fork's copy: the same bytes, holes kept as holes, a new inode the source's removal cannot
// touch, and progress reported up to the data copied.
TEST(EnvTest, CopyFileIsAnIndependentSparseCopy) {
  testing::TempDir dir;
  Env* env = Env::Default();
  std::string from = dir.Sub("from"), to = dir.Sub("to");
  ASSERT_TRUE(env->Truncate(from, 256ull << 20).ok());
  testing::GuestWriteBytes(from, layout::DiskFormat::kRaw, 1 << 20, std::string(8192, 'a'));
  testing::GuestWriteBytes(from, layout::DiskFormat::kRaw, 200 << 20, std::string(4096, 'b'));
  uint64_t last = 0;
  Result<Env::CopyMethod> m = env->CopyFile(from, to, [&](uint64_t n) { last = n; });
  ASSERT_TRUE(m.ok()) << m.error().ToString();
  FileInfo a = *env->Stat(from), b = *env->Stat(to);
  EXPECT_EQ(b.apparent, a.apparent);
  EXPECT_NE(b.inode, a.inode);
  EXPECT_EQ(b.mode & 0777, 0600u);
  EXPECT_GE(last, 12288u);
  if (*m == Env::CopyMethod::kSparse) {
    EXPECT_LT(b.allocated, 4u << 20);
  }
  EXPECT_TRUE(testing::SameGuestView(from, layout::DiskFormat::kRaw, to, layout::DiskFormat::kRaw));
  ASSERT_TRUE(env->RemoveFile(from).ok());
  EXPECT_TRUE(testing::GuestReads(to, layout::DiskFormat::kRaw, 200 << 20, 4096, 'b'));
  // Never over an existing file; a failed copy leaves nothing.
  ASSERT_TRUE(env->WriteFile(from, "x").ok());
  EXPECT_FALSE(env->CopyFile(from, to).ok());
  EXPECT_FALSE(env->CopyFile(dir.Sub("missing"), dir.Sub("made")).ok());
  EXPECT_FALSE(env->Exists(dir.Sub("made")));
}

TEST(EnvTest, LocksExcludeEachOther) {
  testing::TempDir dir;
  Env* env = Env::Default();
  auto a = env->LockFile(dir.Sub("lock"), false);
  ASSERT_TRUE(a.ok());
  auto b = env->LockFile(dir.Sub("lock"), false);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.error().code(), ErrorCode::kBusy);
  a = Error(ErrorCode::kInternal, "drop");  // releases
  EXPECT_TRUE(env->LockFile(dir.Sub("lock"), false).ok());
}

TEST(EnvTest, RenameNoReplaceRefusesExisting) {
  testing::TempDir dir;
  Env* env = Env::Default();
  ASSERT_TRUE(env->WriteFile(dir.Sub("a"), "a").ok());
  ASSERT_TRUE(env->WriteFile(dir.Sub("b"), "b").ok());
  Status s = env->Rename(dir.Sub("a"), dir.Sub("b"), true);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().code(), ErrorCode::kAlreadyExists);
  EXPECT_EQ(*env->ReadFile(dir.Sub("b")), "b");
}

TEST(EnvTest, CloneOnExt4OrTmpfsIsUnavailableNotAnError) {
  testing::TempDir dir;
  Env* env = Env::Default();
  ASSERT_TRUE(env->WriteFile(dir.Sub("a"), std::string(8192, 'x')).ok());
  Status s = env->CloneFile(dir.Sub("a"), dir.Sub("b"));
  if (s.ok()) {
    EXPECT_EQ(*env->ReadFile(dir.Sub("b")), std::string(8192, 'x'));
  } else {
    EXPECT_EQ(s.error().code(), ErrorCode::kUnavailable);
    EXPECT_FALSE(env->Exists(dir.Sub("b")));
  }
}

TEST(FaultInjectionEnvTest, CrashStopsEverythingFromThatStep) {
  testing::TempDir dir;
  FaultInjectionEnv fi(Env::Default());
  fi.CrashAtStep(2);
  // AtomicWriteFile is write(0), fsync(1), rename(2), fsync dir(3): the crash leaves the temp.
  Status s = fi.AtomicWriteFile(dir.Sub("f"), "data");
  EXPECT_FALSE(s.ok());
  EXPECT_TRUE(fi.crashed());
  EXPECT_TRUE(Env::Default()->Exists(dir.Sub("f.tmp")));
  EXPECT_FALSE(Env::Default()->Exists(dir.Sub("f")));
  EXPECT_FALSE(fi.Stat(dir.Sub("f.tmp")).ok()) << "reads fail after the crash too";
  EXPECT_FALSE(fi.WriteFile(dir.Sub("g"), "x").ok());
  EXPECT_FALSE(Env::Default()->Exists(dir.Sub("g")));
}

TEST(FaultInjectionEnvTest, FailOneStepThenContinue) {
  testing::TempDir dir;
  FaultInjectionEnv fi(Env::Default());
  fi.FailStepWith(0, Error(ErrorCode::kNoSpace, "disk full"));
  Status s = fi.WriteFile(dir.Sub("a"), "x");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().code(), ErrorCode::kNoSpace);
  EXPECT_TRUE(fi.WriteFile(dir.Sub("a"), "x").ok());
  EXPECT_EQ(fi.steps(), 2);
}

}  // namespace
}  // namespace cloister
