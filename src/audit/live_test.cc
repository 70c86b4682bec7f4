// The audit on a mounted filesystem (a loop device), as it runs in the guest: frozen while probing,
// thawed after, refusing when it cannot freeze. Needs root and loop devices; skips otherwise.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>

#include "audit/audit.h"
#include "audit/test_images.h"
#include "base/strings.h"
#include "base/subprocess.h"

namespace cloister::audit {
namespace {

using testing::MakeExt4;
using testing::NonZeroBytes;
using testing::ReadAll;
using testing::TempDir;
using testing::WriteAll;

class LiveMountTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root (loop devices, mount, FIFREEZE)";
    img_ = dir_.File("disk.img");
    MakeExt4(img_, 32 * 1024);
    auto loop = RunProcess({"losetup", "--find", "--show", img_});
    if (!loop.ok() || !loop->success()) GTEST_SKIP() << "no loop devices here";
    loop_ = Trim(loop->out);
    mnt_ = dir_.File("mnt");
    std::filesystem::create_directories(mnt_);
    auto m = RunProcess({"mount", "-t", "ext4", loop_, mnt_});
    ASSERT_TRUE(m.ok() && m->success()) << (m.ok() ? m->err : m.error().ToString());
    mounted_ = true;
  }
  void TearDown() override {
    if (mounted_) {
      (void)RunProcess({"fsfreeze", "-u", mnt_});
      (void)RunProcess({"umount", mnt_});
    }
    if (!loop_.empty()) (void)RunProcess({"losetup", "-d", loop_});
  }
  Result<DiskReport> Audit() {
    DiskAuditOptions o;
    o.audit.run_id.fill(5);
    o.audit.kind = DiskKind::kHome;
    o.freeze_timeout = std::chrono::seconds(120);
    return AuditDisk(loop_, o);
  }
  TempDir dir_;
  std::string img_, loop_, mnt_;
  bool mounted_ = false;
};

TEST_F(LiveMountTest, FreezesProbesThawsAndFindsTheDisksOwnDeletedFile) {
  std::string file = mnt_ + "/deleted.env";
  WriteAll(file, NonZeroBytes(1 << 20, 11));
  ASSERT_TRUE(RunProcessChecked({"sync", "-f", mnt_}).ok());
  std::filesystem::remove(file);
  ASSERT_TRUE(RunProcessChecked({"sync", "-f", mnt_}).ok());

  struct stat st;
  ASSERT_EQ(stat(img_.c_str(), &st), 0);
  const uint64_t allocated_before = static_cast<uint64_t>(st.st_blocks) * 512;
  auto r = Audit();
  ASSERT_TRUE(r.ok()) << r.error().ToString();
  EXPECT_TRUE(r->frozen);
  EXPECT_EQ(r->mountpoint, mnt_);
  EXPECT_TRUE(r->allocation_unchanged);
  EXPECT_GT(r->probed_regions, 100u);
  // BLKDISCARD works on the mounted, frozen device (as in the guest): every probed region was
  // given back, and the loop device's backing file holds no more than before (less: the deleted
  // file's regions are holes now).
  EXPECT_EQ(r->given_back_regions, r->probed_regions);
  ASSERT_EQ(stat(img_.c_str(), &st), 0);
  EXPECT_LT(static_cast<uint64_t>(st.st_blocks) * 512, allocated_before);
  // 1 MiB of the disk's own deleted file sits in free blocks: at least 14 whole regions' worth.
  EXPECT_GE(r->bytes.foreign, 14 * (kRegionSize - kProbeSize));
  EXPECT_FALSE(r->Clean());

  // Thawed: the filesystem takes writes again, and after unmounting it is intact.
  WriteAll(mnt_ + "/after", "still writable");
  ASSERT_TRUE(RunProcessChecked({"sync", "-f", mnt_}).ok());
  ASSERT_TRUE(RunProcessChecked({"umount", mnt_}).ok());
  mounted_ = false;
  auto fsck = RunProcess({"e2fsck", "-fn", loop_});
  ASSERT_TRUE(fsck.ok());
  EXPECT_EQ(fsck->exit_code, 0) << fsck->out;
}

TEST_F(LiveMountTest, RefusesWhenItCannotFreezeAndWritesNothing) {
  // Someone else holds the filesystem frozen: FIFREEZE fails with EBUSY, so the audit must refuse.
  ASSERT_TRUE(RunProcessChecked({"fsfreeze", "-f", mnt_}).ok());
  std::string before = ReadAll(loop_);
  auto r = Audit();
  std::string after = ReadAll(loop_);
  ASSERT_TRUE(RunProcessChecked({"fsfreeze", "-u", mnt_}).ok());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), ErrorCode::kFailedPrecondition) << r.error().ToString();
  EXPECT_NE(r.error().message().find("cannot freeze"), std::string::npos);
  EXPECT_TRUE(before == after) << "a refused audit wrote to the device";
}

TEST_F(LiveMountTest, UnmountedDeviceIsAuditedWithoutFreezing) {
  ASSERT_TRUE(RunProcessChecked({"umount", mnt_}).ok());
  mounted_ = false;
  auto r = Audit();
  ASSERT_TRUE(r.ok()) << r.error().ToString();
  EXPECT_FALSE(r->frozen);
  EXPECT_TRUE(r->mountpoint.empty());
  EXPECT_TRUE(r->Clean());
}

}  // namespace
}  // namespace cloister::audit
