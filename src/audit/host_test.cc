#include "audit/host.h"

#include <gtest/gtest.h>

#include <map>

#include "base/strings.h"

namespace cloister::audit {
namespace {

// A base image whose 4 KiB blocks are all 0x42 except where told otherwise.
class FakeBase : public BaseImage {
 public:
  Result<std::array<uint8_t, 32>> BlockSha256(uint64_t offset) override {
    std::string block(kProbeSize, '\x42');
    return Sha256(reinterpret_cast<const uint8_t*>(block.data()), block.size());
  }
};

std::array<uint8_t, 32> HashOf(char fill) {
  std::string block(kProbeSize, fill);
  return Sha256(reinterpret_cast<const uint8_t*>(block.data()), block.size());
}

// A guest report for a base disk with two unresolved blocks: one equal to the base, one not.
GuestRun GuestWithUnresolved() {
  DiskReport d;
  d.device = "/dev/vda";
  d.kind = DiskKind::kBase;
  d.device_bytes = 1 << 20;
  d.block_size = 4096;
  d.fs_blocks = 256;
  d.free_regions = 4;
  d.probed_regions = 1;
  d.probe_writes = 1;
  d.given_back_regions = 1;
  d.windows = d.sampled_windows = 1;
  d.sampled_window_free_regions = 4;
  d.allocation_unchanged = true;
  d.bytes.probe = kProbeSize;
  d.bytes.unresolved = 2 * kProbeSize;
  d.bytes.zero = kRegionSize - 3 * kProbeSize;
  d.unresolved = {UnresolvedBlock{4096, HashOf('\x42'), 0}, UnresolvedBlock{8192, HashOf('\x07'), 100}};
  AuditReport r;
  r.disks = {d};
  return GuestRun{kAuditClean, ReportToJson(r).dump(), ""};
}

TEST(SettleGuestAuditTest, ResolvesUnresolvedBlocksAgainstTheBase) {
  FakeBase base;
  auto r = SettleGuestAudit(GuestWithUnresolved(), &base);
  ASSERT_TRUE(r.ok()) << r.error().ToString();
  const DiskReport& d = r->disks[0];
  EXPECT_EQ(d.bytes.unresolved, 0u);
  EXPECT_EQ(d.bytes.base_image, kProbeSize);
  EXPECT_EQ(d.bytes.foreign, kProbeSize - 100);
  EXPECT_EQ(d.bytes.Total(), kRegionSize);
  EXPECT_EQ(d.foreign_regions, std::vector<uint64_t>{0});
  EXPECT_FALSE(r->Clean());
}

TEST(SettleGuestAuditTest, UnresolvedWithoutABaseImageIsAnError) {
  auto r = SettleGuestAudit(GuestWithUnresolved(), nullptr);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), ErrorCode::kFailedPrecondition);
}

TEST(SettleGuestAuditTest, GuestErrorQuotesItsLastStderrLineSanitized) {
  GuestRun run{kAuditError, "", "warming up\ncloister-audit: error: cannot freeze /\x1b[31m\n\n"};
  auto r = SettleGuestAudit(run, nullptr);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), ErrorCode::kUnavailable);
  EXPECT_NE(r.error().message().find("cannot freeze /"), std::string::npos);
  EXPECT_EQ(r.error().message().find('\x1b'), std::string::npos);
  EXPECT_EQ(r.error().message().find("warming"), std::string::npos);
  // A signal-killed or unknown exit is an error too, even with a plausible report on stdout.
  GuestRun killed = GuestWithUnresolved();
  killed.exit_code = 137;
  EXPECT_FALSE(SettleGuestAudit(killed, nullptr).ok());
}

TEST(SettleGuestAuditTest, CleanExitWithForeignBytesIsAContradiction) {
  GuestRun run = GuestWithUnresolved();
  auto parsed = ParseAuditReport(run.out);
  ASSERT_TRUE(parsed.ok());
  parsed->disks[0].bytes.zero -= 10;
  parsed->disks[0].bytes.foreign += 10;
  run.out = ReportToJson(*parsed).dump();
  FakeBase base;
  auto r = SettleGuestAudit(run, &base);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), ErrorCode::kCorrupt);
  run.exit_code = kAuditFoundForeign;
  EXPECT_TRUE(SettleGuestAudit(run, &base).ok());
}

TEST(SettleGuestAuditTest, GuestArgvAuditsBothDisksAsJsonSampledByDefault) {
  auto join = [](const std::vector<std::string>& argv) {
    std::string joined;
    for (const auto& a : argv) joined += a + " ";
    return joined;
  };
  GuestAuditOptions o;
  auto argv = GuestAuditArgv(o);
  std::string joined = join(argv);
  EXPECT_EQ(argv[0], kGuestAuditPath);
  EXPECT_NE(joined.find("--json"), std::string::npos);
  EXPECT_NE(joined.find("--disk /dev/vda:base"), std::string::npos);
  EXPECT_NE(joined.find("--disk /dev/vdb:home"), std::string::npos);
  EXPECT_NE(joined.find("--sample " + std::to_string(kDefaultSampleRegions)), std::string::npos);
  EXPECT_EQ(joined.find("--exhaustive"), std::string::npos);
  o.sample_regions = 16;
  EXPECT_NE(join(GuestAuditArgv(o)).find("--sample 16 "), std::string::npos);
  o.exhaustive = true;
  o.progress = true;
  joined = join(GuestAuditArgv(o));
  EXPECT_NE(joined.find("--exhaustive"), std::string::npos);
  EXPECT_NE(joined.find("--progress"), std::string::npos);
  EXPECT_EQ(joined.find("--sample"), std::string::npos);
}

// The default audit of a default workspace (64 GiB home, a 4 GiB system disk) costs the host a
// few MiB at most, whatever the layers do with discards; exhaustive costs more tables, not more
// regions.
TEST(AuditCostTest, DefaultAuditOfADefaultWorkspaceIsBoundedByAFewMiB) {
  const std::vector<uint64_t> disks = {uint64_t{4} << 30, uint64_t{64} << 30};
  GuestAuditOptions sampled;
  AuditCost c = EstimateAuditCost(disks, sampled);
  EXPECT_LE(c.peak_allocation, uint64_t{8} << 20);
  EXPECT_GE(c.peak_allocation, 2 * kDefaultMaxNotGivenBackBytes);
  EXPECT_EQ(c.max_read, 2 * kDefaultSampleRegions * kRegionSize);
  GuestAuditOptions all;
  all.exhaustive = true;
  AuditCost e = EstimateAuditCost(disks, all);
  EXPECT_EQ(e.max_read, disks[0] + disks[1]);
  // 8 + 128 windows of 512 MiB, one L2 table each, against 8 + 16 sampled; the same caps.
  EXPECT_EQ(e.peak_allocation - c.peak_allocation, (136 - 24) * kWindowMetadataBytes);
}

TEST(AuditCostTest, RefusesWithTheFiguresWhenTheHostIsShortOfSpace) {
  AuditCost cost{.peak_allocation = 6 << 20, .max_read = 0};
  EXPECT_TRUE(CheckHostFreeSpace("/ws", cost.peak_allocation + kHostFreeReserve, cost).ok());
  Status s = CheckHostFreeSpace("/ws", 100 << 20, cost);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().code(), ErrorCode::kNoSpace);
  std::string text = s.error().ToString();
  EXPECT_NE(text.find("/ws"), std::string::npos) << text;
  EXPECT_NE(text.find(FormatSize(100 << 20)), std::string::npos) << text;
  EXPECT_NE(text.find(FormatSize(6 << 20)), std::string::npos) << text;
  EXPECT_NE(text.find("free at least"), std::string::npos) << text;
  auto here = HostAvailableBytes("/");
  ASSERT_TRUE(here.ok());
  EXPECT_GT(*here, 0u);
}

TEST(AuditCostTest, OnlyPrefixedProgressLinesOfTheGuestAreShownAndSanitized) {
  EXPECT_EQ(GuestProgressLine("progress: /dev/vdb: 5/10 regions (50%)"),
            std::optional<std::string>("progress: /dev/vdb: 5/10 regions (50%)"));
  auto p = GuestProgressLine("plan: \x1b[2Jx" + std::string(500, 'a'));
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->find('\x1b'), std::string::npos);
  EXPECT_LE(p->size(), 160u);
  EXPECT_FALSE(GuestProgressLine("cloister-audit: error: x").has_value());
  EXPECT_FALSE(GuestProgressLine(" progress: x").has_value());
}

TEST(SettleGuestAuditTest, SanitizeKeepsOnePrintableBoundedLine) {
  EXPECT_EQ(SanitizeGuestText("a\nb\x01" "c", 10), "a b c");
  EXPECT_EQ(SanitizeGuestText(std::string(1000, 'x')).size(), 300u);
}

}  // namespace
}  // namespace cloister::audit
