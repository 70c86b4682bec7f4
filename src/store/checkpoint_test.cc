#include <gtest/gtest.h>

#include "base/subprocess.h"
#include "store/retention.h"
#include "store/store.h"
#include "store/test_util.h"

namespace cloister {
namespace {

using layout::DiskFormat;
using testing::GuestReads;
using testing::GuestWrite;
using testing::SameGuestView;

constexpr uint64_t kCheckpointBaseSize = 256ull << 20;
constexpr uint64_t kCheckpointHomeSize = 128ull << 20;
constexpr uint64_t kSysOff = 3 << 20;   // where tests write on the system disk
constexpr uint64_t kHomeOff = 40 << 20;  // and in home

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    base_ = tmp_.Sub("base.raw");
    testing::MakeBaseImage(base_, kCheckpointBaseSize);
    root_ = tmp_.Sub("store");
    StoreOptions o;
    o.clock = clock_.fn();
    o.system_disk_mode = SystemDiskMode::kQcow2;
    store_ = std::move(Store::Open(root_, o)).value();
    CreateRequest r;
    r.name = "dev";
    r.image = base_;
    r.home_size = kCheckpointHomeSize;
    ASSERT_TRUE(store_->Create(r).ok());
  }

  LiveDisks Disks() { return store_->LiveDiskPaths("dev", *store_->LoadConfig("dev")); }
  // Writes `pattern` to both disks, as a guest session would.
  void Session(int pattern) {
    LiveDisks d = Disks();
    GuestWrite(d.system.path, d.system.format, kSysOff, 4096, pattern);
    GuestWrite(d.home.path, d.home.format, kHomeOff, 4096, pattern);
  }
  bool Sees(int pattern) {
    LiveDisks d = Disks();
    return GuestReads(d.system.path, d.system.format, kSysOff, 4096, pattern) &&
           GuestReads(d.home.path, d.home.format, kHomeOff, 4096, pattern);
  }
  std::string Checkpoint(bool automatic = false) {
    Result<CheckpointRecord> r = store_->CreateCheckpoint("dev", {automatic});
    EXPECT_TRUE(r.ok()) << r.error().ToString();
    clock_.now += 60;
    return r.ok() ? r->id : "";
  }
  std::string Consistent() { return testing::CheckStore(root_, true); }

  testing::TempDir tmp_;
  testing::FakeClock clock_;
  std::string base_, root_;
  std::unique_ptr<Store> store_;
};

TEST_F(CheckpointTest, CreateRestoreCoversDiskAndHomeTogether) {
  Session(0x11);
  std::string c1 = Checkpoint();
  EXPECT_EQ(c1, FormatUtcCompact(clock_.now - 60));
  WorkspaceConfig c = *store_->LoadConfig("dev");
  ASSERT_EQ(c.checkpoints.size(), 1u);
  EXPECT_EQ(c.checkpoints[0].system, "checkpoints/" + c1 + "/system.qcow2");
  EXPECT_EQ(c.checkpoints[0].home, "checkpoints/" + c1 + "/home.img");
  // The live tops are fresh qcow2 overlays over the frozen layers (copy-on-write: tiny).
  LiveDisks d = Disks();
  EXPECT_EQ(d.home.format, DiskFormat::kQcow2);
  EXPECT_EQ(testing::BackingOf(d.home.path), store_->Paths("dev").dir + "/" + c.checkpoints[0].home);
  EXPECT_LT(Env::Default()->Stat(d.home.path)->allocated, 1u << 20);
  EXPECT_TRUE(Sees(0x11));
  Session(0x22);
  EXPECT_TRUE(Sees(0x22));
  std::string c2 = Checkpoint();
  Session(0x33);
  ASSERT_TRUE(store_->RestoreCheckpoint("dev", c1).ok());
  EXPECT_TRUE(Sees(0x11));
  Session(0x44);  // diverge from c1
  ASSERT_TRUE(store_->RestoreCheckpoint("dev", c2).ok());
  EXPECT_TRUE(Sees(0x22));
  ASSERT_TRUE(store_->RestoreCheckpoint("dev", c1).ok());
  EXPECT_TRUE(Sees(0x11)) << "restoring twice must not be affected by writes after a restore";
  EXPECT_EQ(Consistent(), "");
  Status missing = store_->RestoreCheckpoint("dev", "20200101-000000");
  EXPECT_EQ(missing.error().code(), ErrorCode::kNotFound);
}

TEST_F(CheckpointTest, RemoveMergesLayersWithoutChangingWhatOthersSee) {
  Session(0x11);
  std::string c1 = Checkpoint();
  Session(0x22);
  std::string c2 = Checkpoint();
  Session(0x33);
  std::string c3 = Checkpoint();
  Session(0x44);
  // Save what every checkpoint and the live disks look like.
  auto snapshot = [&](const std::string& id) {
    WorkspaceConfig c = *store_->LoadConfig("dev");
    const CheckpointRecord* r = c.FindCheckpoint(id);
    std::string dir = store_->Paths("dev").dir;
    return std::make_pair(dir + "/" + r->system, dir + "/" + r->home);
  };
  std::string out = tmp_.Sub("c3-home.raw");
  auto [c3_sys, c3_home] = snapshot(c3);
  ASSERT_TRUE(RunProcessChecked({"qemu-img", "convert", "-O", "raw", c3_home, out}).ok());
  ASSERT_TRUE(store_->RemoveCheckpoint("dev", c2).ok());
  WorkspaceConfig c = *store_->LoadConfig("dev");
  EXPECT_EQ(c.checkpoints.size(), 2u);
  EXPECT_FALSE(Env::Default()->Exists(store_->Paths("dev").checkpoints_dir + "/" + c2));
  auto [c3_sys_after, c3_home_after] = snapshot(c3);
  EXPECT_TRUE(SameGuestView(c3_home_after, DiskFormat::kQcow2, out, DiskFormat::kRaw));
  EXPECT_TRUE(Sees(0x44));
  ASSERT_TRUE(store_->RemoveCheckpoint("dev", c1).ok());
  ASSERT_TRUE(store_->RemoveCheckpoint("dev", c3).ok());
  EXPECT_TRUE(Sees(0x44));
  c = *store_->LoadConfig("dev");
  EXPECT_TRUE(c.checkpoints.empty());
  // What remains: the live tops, the system chain merged down to base, and home's raw bottom
  // layer (kept internal: merging a raw bottom would copy the whole disk).
  EXPECT_LE(c.layers.size(), 3u);
  EXPECT_EQ(c.FindLayer(c.system_top)->on_base, true);
  EXPECT_EQ(Consistent(), "");
  EXPECT_EQ(store_->RemoveCheckpoint("dev", c1).error().code(), ErrorCode::kNotFound);
}

TEST_F(CheckpointTest, TieredRetentionWithInjectedClock) {
  // A manual checkpoint is never pruned.
  std::string manual = Checkpoint(false);
  // Automatic checkpoints: 3 boots a day for 12 days.
  std::vector<std::string> ids;
  for (int day = 0; day < 12; ++day) {
    for (int boot = 0; boot < 3; ++boot) {
      clock_.now += 8 * 3600;
      Session(0x10 + (day * 3 + boot) % 100);
      ids.push_back(Checkpoint(true));
    }
  }
  WorkspaceConfig c = *store_->LoadConfig("dev");
  std::vector<int64_t> times;
  int autos = 0;
  for (const CheckpointRecord& r : c.checkpoints) {
    if (r.automatic) {
      ++autos;
      times.push_back(r.created);
    }
  }
  EXPECT_TRUE(c.FindCheckpoint(manual));
  // What SelectRetained keeps of the survivors is all of them (retention ran after each one),
  // and it is bounded well below the 36 taken.
  for (bool k : SelectRetained(times, clock_.now)) EXPECT_TRUE(k);
  EXPECT_LE(autos, 3 + 7 + 5);
  EXPECT_GE(autos, 8);
  EXPECT_TRUE(c.FindCheckpoint(ids.back()));
  EXPECT_FALSE(c.FindCheckpoint(ids.front()) && c.FindCheckpoint(ids[1]));
  // Layers stay bounded: every removed checkpoint's layers were merged or deleted.
  EXPECT_LE(c.layers.size(), 2 * (c.checkpoints.size() + 1) + 1);
  // Each survivor still restores to what the guest wrote before it.
  ASSERT_TRUE(store_->RestoreCheckpoint("dev", ids.back()).ok());
  EXPECT_TRUE(Sees(0x10 + 35));
  EXPECT_EQ(Consistent(), "");
  // A month later, retention leaves the newest 3 automatic ones and the manual one.
  clock_.now += 40 * 86400;
  Result<std::vector<std::string>> pruned = store_->ApplyRetention("dev");
  ASSERT_TRUE(pruned.ok());
  c = *store_->LoadConfig("dev");
  EXPECT_EQ(c.checkpoints.size(), 4u);
  EXPECT_TRUE(c.FindCheckpoint(manual));
  EXPECT_EQ(Consistent(), "");
}

TEST_F(CheckpointTest, LiveCheckpointApiPrepareCommitAbort) {
  Session(0x11);
  auto lock = store_->LockWorkspace("dev");
  ASSERT_TRUE(lock.ok());
  // Abort leaves nothing behind.
  Result<PreparedCheckpoint> p = store_->PrepareCheckpoint(*lock);
  ASSERT_TRUE(p.ok()) << p.error().ToString();
  ASSERT_EQ(p->disks.size(), 2u);
  for (const auto& d : p->disks) {
    EXPECT_TRUE(Env::Default()->Exists(d.new_top_path));
    EXPECT_EQ(testing::BackingOf(d.new_top_path), d.layer_path);
  }
  ASSERT_TRUE(store_->AbortCheckpoint(*lock, *p).ok());
  EXPECT_EQ(Consistent(), "");
  EXPECT_TRUE(store_->LoadConfig("dev")->checkpoints.empty());
  // Prepare, then (as QEMU would after blockdev-snapshot) the guest writes into the new overlays,
  // then commit.
  p = store_->PrepareCheckpoint(*lock, {true});
  ASSERT_TRUE(p.ok());
  for (const auto& d : p->disks) {
    uint64_t off = d.disk == DiskKind::kSystem ? kSysOff : kHomeOff;
    GuestWrite(d.new_top_path, DiskFormat::kQcow2, off, 4096, 0x77);
  }
  Result<CheckpointRecord> rec = store_->CommitCheckpoint(*lock, *p, /*vm_running=*/true);
  ASSERT_TRUE(rec.ok()) << rec.error().ToString();
  EXPECT_TRUE(rec->automatic);
  EXPECT_TRUE(Sees(0x77));
  EXPECT_EQ(Disks().system.path, p->disks[0].new_top_path);
  lock = Error(ErrorCode::kInternal, "release");
  ASSERT_TRUE(store_->RestoreCheckpoint("dev", rec->id).ok());
  EXPECT_TRUE(Sees(0x11));
  EXPECT_EQ(Consistent(), "");
}

TEST_F(CheckpointTest, CheckpointAfterResetRecordsAbsentSystemDisk) {
  Session(0x11);
  ASSERT_TRUE(store_->Reset("dev").ok());
  std::string c1 = Checkpoint();
  EXPECT_TRUE(store_->LoadConfig("dev")->FindCheckpoint(c1)->system.empty());
  {
    auto lock = store_->LockWorkspace("dev");
    ASSERT_TRUE(store_->EnsureSystemDisk(*lock).ok());
  }
  Session(0x22);
  ASSERT_TRUE(store_->RestoreCheckpoint("dev", c1).ok());
  EXPECT_TRUE(store_->LoadConfig("dev")->system_top.empty());
  LiveDisks d = Disks();
  EXPECT_TRUE(GuestReads(d.home.path, d.home.format, kHomeOff, 4096, 0x11));
  EXPECT_EQ(Consistent(), "");
}

}  // namespace
}  // namespace cloister
