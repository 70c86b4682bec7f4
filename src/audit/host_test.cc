#include "audit/host.h"

#include <gtest/gtest.h>

#include <map>

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
  d.probe_writes = 2;
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

TEST(SettleGuestAuditTest, GuestArgvAuditsBothDisksAsJson) {
  auto argv = GuestAuditArgv(16);
  std::string joined;
  for (const auto& a : argv) joined += a + " ";
  EXPECT_EQ(argv[0], kGuestAuditPath);
  EXPECT_NE(joined.find("--json"), std::string::npos);
  EXPECT_NE(joined.find("--disk /dev/vda:base"), std::string::npos);
  EXPECT_NE(joined.find("--disk /dev/vdb:home"), std::string::npos);
  EXPECT_NE(joined.find("--max-regions 16"), std::string::npos);
}

TEST(SettleGuestAuditTest, SanitizeKeepsOnePrintableBoundedLine) {
  EXPECT_EQ(SanitizeGuestText("a\nb\x01" "c", 10), "a b c");
  EXPECT_EQ(SanitizeGuestText(std::string(1000, 'x')).size(), 300u);
}

}  // namespace
}  // namespace cloister::audit
