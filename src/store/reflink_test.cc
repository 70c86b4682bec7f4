// The reflink (FICLONE) path for real, on an XFS filesystem the test makes in a loop-mounted
// image in a temp dir. Skipped (with the reason) where loop devices or mkfs.xfs are unavailable.
#include <sys/mount.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include "base/strings.h"
#include "base/subprocess.h"
#include "store/store.h"
#include "store/test_util.h"

namespace cloister {
namespace {

using layout::DiskFormat;

class ReflinkTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root to mount a loop device";
    if (!ProgramExists("mkfs.xfs")) GTEST_SKIP() << "mkfs.xfs not installed (xfsprogs)";
    image_ = tmp_.Sub("xfs.img");
    mnt_ = tmp_.Sub("mnt");
    ASSERT_TRUE(Env::Default()->CreateDirs(mnt_).ok());
    ASSERT_TRUE(Env::Default()->Truncate(image_, 1ull << 30).ok());
    ASSERT_TRUE(RunProcessChecked({"mkfs.xfs", "-q", "-m", "reflink=1", image_}).ok());
    Result<RunOutput> m = RunProcess({"mount", "-o", "loop", image_, mnt_});
    if (!m.ok() || !m->success()) {
      GTEST_SKIP() << "cannot loop-mount an XFS image here: " << (m.ok() ? m->err : m.error().ToString());
    }
    mounted_ = true;
  }
  void TearDown() override {
    if (mounted_) {
      Result<RunOutput> r = RunProcess({"umount", mnt_});
      EXPECT_TRUE(r.ok() && r->success());
    }
  }

  testing::TempDir tmp_;
  std::string image_, mnt_;
  bool mounted_ = false;
};

TEST_F(ReflinkTest, SystemDiskIsAReflinkCloneSharingEveryBlock) {
  // A base with 64 MiB of real data, on the same filesystem as the store.
  std::string base = mnt_ + "/base.raw";
  ASSERT_TRUE(RunProcessChecked({"dd", "if=/dev/urandom", "of=" + base, "bs=1M", "count=64",
                                 "status=none"}).ok());
  StoreOptions o;  // kAuto
  auto store = std::move(Store::Open(mnt_ + "/store", o)).value();
  CreateRequest req;
  req.name = "dev";
  req.image = base;
  req.home_size = 128 << 20;
  ASSERT_TRUE(store->Create(req).ok());  // first create: also hashes the base
  uint64_t free_before = *Env::Default()->FreeSpace(mnt_);
  req.name = "dev2";
  ASSERT_TRUE(store->Create(req).ok());
  uint64_t free_after = *Env::Default()->FreeSpace(mnt_);
  LiveDisks d = store->LiveDiskPaths("dev2", *store->LoadConfig("dev2"));
  EXPECT_EQ(d.system.format, DiskFormat::kRaw);
  EXPECT_EQ(BaseName(d.system.path), "system.1.img");
  EXPECT_TRUE(testing::SameGuestView(d.system.path, DiskFormat::kRaw, base, DiskFormat::kRaw));
  // The clone shares the base's 64 MiB: creating it took far less than that.
  EXPECT_LT(free_before - free_after, 16ull << 20)
      << "a clone must not copy the base (" << FormatSize(free_before - free_after) << " used)";
  // Copy-on-write: the guest writing its disk leaves the base untouched.
  testing::GuestWrite(d.system.path, DiskFormat::kRaw, 1 << 20, 4096, 0x5a);
  EXPECT_FALSE(testing::SameGuestView(d.system.path, DiskFormat::kRaw, base, DiskFormat::kRaw));
  EXPECT_FALSE(testing::GuestReads(base, DiskFormat::kRaw, 1 << 20, 4096, 0x5a));

  // Checkpoints over a raw clone: the clone becomes a frozen raw layer under a qcow2 overlay.
  Result<CheckpointRecord> c = store->CreateCheckpoint("dev2");
  ASSERT_TRUE(c.ok()) << c.error().ToString();
  EXPECT_EQ(c->system, "checkpoints/" + c->id + "/system.img");
  d = store->LiveDiskPaths("dev2", *store->LoadConfig("dev2"));
  testing::GuestWrite(d.system.path, d.system.format, 1 << 20, 4096, 0x6b);
  ASSERT_TRUE(store->RestoreCheckpoint("dev2", c->id).ok());
  d = store->LiveDiskPaths("dev2", *store->LoadConfig("dev2"));
  EXPECT_TRUE(testing::GuestReads(d.system.path, d.system.format, 1 << 20, 4096, 0x5a));
  // Reset, then start: a fresh reflink clone again.
  ASSERT_TRUE(store->Reset("dev2").ok());
  auto lock = store->LockWorkspace("dev2");
  Result<LiveDisks> live = store->EnsureSystemDisk(*lock);
  ASSERT_TRUE(live.ok()) << live.error().ToString();
  EXPECT_EQ(live->system.format, DiskFormat::kRaw);
  EXPECT_TRUE(testing::SameGuestView(live->system.path, DiskFormat::kRaw, base, DiskFormat::kRaw));
  EXPECT_EQ(testing::CheckStore(mnt_ + "/store", true), "");
}

TEST_F(ReflinkTest, ForcedReflinkOnExt4IsAClearError) {
  testing::TempDir ext4;  // /tmp: ext4 or tmpfs here, neither can reflink
  std::string base = ext4.Sub("base.raw");
  testing::MakeBaseImage(base, 64 << 20);
  StoreOptions o;
  o.system_disk_mode = SystemDiskMode::kReflink;
  auto store = std::move(Store::Open(ext4.Sub("store"), o)).value();
  CreateRequest req;
  req.name = "dev";
  req.image = base;
  req.home_size = 64 << 20;
  Result<WorkspaceConfig> r = store->Create(req);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), ErrorCode::kUnavailable);
  EXPECT_TRUE(store->List()->empty());
}

}  // namespace
}  // namespace cloister
