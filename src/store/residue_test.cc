// The residue test at the storage layer (issue 2): write a canary into workspace A's system disk
// and home the way a guest would (4 KiB writes at 64 KiB-aligned offsets, through qemu-io), take a
// checkpoint, `rm` A, create B, and read every byte of B's disks as a guest sees them (qemu-img
// convert for qcow2): no canary byte; B's system disk reads exactly as the base image and B's home
// exactly as a fresh home image made the same way.
#include <fcntl.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include "base/subprocess.h"
#include "store/disks.h"
#include "store/store.h"
#include "store/test_util.h"

namespace cloister {
namespace {

using layout::DiskFormat;

constexpr uint64_t kResidueBaseSize = 256ull << 20;
constexpr uint64_t kResidueHomeSize = 256ull << 20;
const std::string kMarker = "CLOISTER-RESIDUE-CANARY-7f3a9c";

// A fake .env, 4 KiB, every line carrying the marker.
std::string Canary() {
  std::string out;
  int i = 0;
  while (out.size() < 4096) {
    out += "ANTHROPIC_API_KEY=sk-ant-api03-" + kMarker + "-" + std::to_string(i++) + "\n";
  }
  out.resize(4096);
  return out;
}

// Count of marker occurrences in the guest view of `path`.
int64_t CountMarker(const std::string& path, DiskFormat format, const std::string& scratch) {
  std::string raw = path;
  if (format == DiskFormat::kQcow2) {
    raw = scratch;
    Result<RunOutput> r =
        RunProcessChecked({"qemu-img", "convert", "-U", "-f", "qcow2", "-O", "raw", path, raw});
    EXPECT_TRUE(r.ok()) << r.error().ToString();
  }
  int fd = open(raw.c_str(), O_RDONLY);
  EXPECT_GE(fd, 0);
  std::string buf(1 << 20, '\0'), carry;
  int64_t hits = 0;
  uint64_t total = 0;
  while (true) {
    ssize_t n = read(fd, buf.data(), buf.size());
    if (n <= 0) break;
    total += static_cast<uint64_t>(n);
    std::string window = carry + buf.substr(0, static_cast<size_t>(n));
    for (size_t pos = window.find(kMarker); pos != std::string::npos;
         pos = window.find(kMarker, pos + 1)) {
      ++hits;
    }
    carry = window.substr(window.size() - (kMarker.size() - 1));
  }
  close(fd);
  EXPECT_GT(total, 0u);
  return hits;
}

void WriteCanaries(const LiveDisk& disk, uint64_t size) {
  std::string canary = Canary();
  // 4 KiB at 64 KiB-aligned offsets: the pattern that leaked in the thin-pool incident, spread
  // over the whole disk.
  for (uint64_t off = 0; off + 4096 <= size; off += 16 << 20) {
    testing::GuestWriteBytes(disk.path, disk.format, off + (64 << 10), canary);
  }
}

class ResidueTest : public ::testing::TestWithParam<SystemDiskMode> {};

TEST_P(ResidueTest, DeletedWorkspaceLeavesNothingForTheNext) {
  testing::TempDir tmp;
  std::string base = tmp.Sub("base.raw");
  testing::MakeBaseImage(base, kResidueBaseSize);
  StoreOptions o;
  o.system_disk_mode = GetParam();
  auto store = std::move(Store::Open(tmp.Sub("store"), o)).value();
  CreateRequest req;
  req.name = "a";
  req.image = base;
  req.home_size = kResidueHomeSize;
  ASSERT_TRUE(store->Create(req).ok());
  LiveDisks a = store->LiveDiskPaths("a", *store->LoadConfig("a"));
  WriteCanaries(a.system, kResidueBaseSize);
  WriteCanaries(a.home, kResidueHomeSize);
  // Sanity: the canary is there to be found in A, also after a checkpoint.
  ASSERT_GT(CountMarker(a.home.path, a.home.format, tmp.Sub("scan.raw")), 10);
  ASSERT_TRUE(store->CreateCheckpoint("a").ok());
  a = store->LiveDiskPaths("a", *store->LoadConfig("a"));
  WriteCanaries(a.home, kResidueHomeSize);
  ASSERT_GT(CountMarker(a.home.path, a.home.format, tmp.Sub("scan.raw")), 10);

  ASSERT_TRUE(store->Remove("a").ok());
  req.name = "b";
  Result<WorkspaceConfig> b_cfg = store->Create(req);
  ASSERT_TRUE(b_cfg.ok());
  LiveDisks b = store->LiveDiskPaths("b", *b_cfg);
  EXPECT_EQ(CountMarker(b.system.path, b.system.format, tmp.Sub("scan.raw")), 0);
  EXPECT_EQ(CountMarker(b.home.path, b.home.format, tmp.Sub("scan.raw")), 0);
  EXPECT_TRUE(testing::SameGuestView(b.system.path, b.system.format, base, DiskFormat::kRaw));
  // A fresh home image made the same way (same UUID and time: the store derives them from the
  // workspace id and creation time) is byte-identical to B's home.
  std::string fresh = tmp.Sub("fresh-home.img");
  ASSERT_TRUE(MakeHomeImage(Env::Default(), fresh, kResidueHomeSize,
                            DeriveUuid(b_cfg->id + "/home/2"), b_cfg->created)
                  .ok());
  EXPECT_TRUE(testing::SameGuestView(b.home.path, b.home.format, fresh, DiskFormat::kRaw));
  Result<RunOutput> cmp = RunProcess({"cmp", b.home.path, fresh});
  ASSERT_TRUE(cmp.ok());
  EXPECT_EQ(cmp->exit_code, 0) << cmp->out;
}

INSTANTIATE_TEST_SUITE_P(Qcow2, ResidueTest, ::testing::Values(SystemDiskMode::kQcow2));

}  // namespace
}  // namespace cloister
