#include "audit/report.h"

#include <gtest/gtest.h>

#include <cstring>

#include "audit/crc.h"
#include "audit/probe.h"

namespace cloister::audit {
namespace {

TEST(CrcTest, Crc32cMatchesTheStandardCheckValue) {
  const char* s = "123456789";
  uint32_t c = ~Crc32cUpdate(0xffffffffu, reinterpret_cast<const uint8_t*>(s), 9);
  EXPECT_EQ(c, 0xE3069283u);
}

TEST(CrcTest, Crc16MatchesTheArcCheckValue) {
  const char* s = "123456789";
  EXPECT_EQ(Crc16Update(0, reinterpret_cast<const uint8_t*>(s), 9), 0xBB3D);
}

TEST(ProbeBlockTest, IsRecognisedOnlyForItsOwnRunAndOffset) {
  RunId a{}, b{};
  a[0] = 1;
  b[0] = 2;
  std::string pa = ProbeBlock(a, 65536);
  ASSERT_EQ(pa.size(), kProbeSize);
  auto m = MatchProbe(reinterpret_cast<const uint8_t*>(pa.data()), 65536);
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(*m, a);
  EXPECT_FALSE(MatchProbe(reinterpret_cast<const uint8_t*>(pa.data()), 131072).has_value());
  EXPECT_NE(pa, ProbeBlock(b, 65536));
  EXPECT_NE(pa, ProbeBlock(a, 131072));
  pa[4000] ^= 1;
  EXPECT_FALSE(MatchProbe(reinterpret_cast<const uint8_t*>(pa.data()), 65536).has_value());
}

DiskReport SampleDisk() {
  DiskReport d;
  d.device = "/dev/vda";
  d.kind = DiskKind::kBase;
  d.mountpoint = "/";
  d.frozen = true;
  d.device_bytes = 64 << 20;
  d.block_size = 4096;
  d.fs_blocks = 16384;
  d.free_blocks = 10000;
  d.free_regions = 600;
  d.probed_regions = 2;
  d.probe_writes = 3;
  d.given_back_regions = 1;
  d.not_given_back_regions = 1;
  d.requested_regions = 1024;
  d.windows = 1;
  d.sampled_windows = 1;
  d.sampled_window_free_regions = 600;
  d.allocation_unchanged = true;
  d.bytes.probe = 2 * kProbeSize;
  d.bytes.unresolved = kProbeSize;
  d.bytes.foreign = 100;
  d.bytes.zero = 2 * kRegionSize - d.bytes.probe - d.bytes.unresolved - d.bytes.foreign;
  d.foreign_regions = {65536};
  UnresolvedBlock u;
  u.offset = 8192;
  u.sha256 = Sha256(reinterpret_cast<const uint8_t*>("x"), 1);
  u.zero_bytes = 7;
  d.unresolved = {u};
  return d;
}

TEST(ReportTest, JsonRoundTripKeepsEveryField) {
  AuditReport r;
  r.run_id[3] = 9;
  r.disks = {SampleDisk()};
  auto parsed = ParseAuditReport(ReportToJson(r).dump());
  ASSERT_TRUE(parsed.ok()) << parsed.error().ToString();
  ASSERT_EQ(parsed->disks.size(), 1u);
  const DiskReport& d = parsed->disks[0];
  EXPECT_EQ(parsed->run_id, r.run_id);
  EXPECT_EQ(d.device, "/dev/vda");
  EXPECT_EQ(d.kind, DiskKind::kBase);
  EXPECT_TRUE(d.frozen);
  EXPECT_EQ(d.bytes.foreign, 100u);
  EXPECT_EQ(d.bytes.Total(), 2 * kRegionSize);
  ASSERT_EQ(d.unresolved.size(), 1u);
  EXPECT_EQ(d.unresolved[0].sha256, SampleDisk().unresolved[0].sha256);
  EXPECT_EQ(d.unresolved[0].zero_bytes, 7u);
  EXPECT_EQ(d.foreign_regions, std::vector<uint64_t>{65536});
  EXPECT_FALSE(parsed->Clean());
}

nlohmann::json SampleJson() {
  AuditReport r;
  r.disks = {SampleDisk()};
  return ReportToJson(r);
}

TEST(ReportTest, RejectsCountsThatDoNotAddUp) {
  auto j = SampleJson();
  j["disks"][0]["bytes"]["zero"] = j["disks"][0]["bytes"]["zero"].get<uint64_t>() + 1;
  auto p = ParseAuditReport(j.dump());
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.error().code(), ErrorCode::kCorrupt);
}

TEST(ReportTest, RejectsHostileShapes) {
  EXPECT_FALSE(ParseAuditReport("").ok());
  EXPECT_FALSE(ParseAuditReport("[]").ok());
  EXPECT_FALSE(ParseAuditReport("{\"version\":1}").ok());
  auto j = SampleJson();
  j["disks"][0]["unresolved_blocks"][0]["sha256"] = "zz";
  EXPECT_FALSE(ParseAuditReport(j.dump()).ok());
  j = SampleJson();
  j["disks"][0]["unresolved_blocks"][0]["offset"] = uint64_t{1} << 40;
  EXPECT_FALSE(ParseAuditReport(j.dump()).ok());
  j = SampleJson();
  j["disks"][0]["foreign_regions"][0] = -1;
  EXPECT_FALSE(ParseAuditReport(j.dump()).ok());
  j = SampleJson();
  j["disks"][0]["kind"] = "home";  // unresolved blocks are only legal on base disks
  EXPECT_FALSE(ParseAuditReport(j.dump()).ok());
  j = SampleJson();
  for (int i = 0; i < 9; ++i) j["disks"].push_back(j["disks"][0]);
  EXPECT_FALSE(ParseAuditReport(j.dump()).ok());
  EXPECT_FALSE(ParseAuditReport(std::string(kMaxReportBytes + 1, ' ')).ok());
}

TEST(ReportTest, SampleAndGiveBackFiguresRoundTripAndMustAddUp) {
  AuditReport r;
  DiskReport d = SampleDisk();
  d.stopped = kStoppedNotGivenBack;
  r.disks = {d};
  auto parsed = ParseAuditReport(ReportToJson(r).dump());
  ASSERT_TRUE(parsed.ok()) << parsed.error().ToString();
  const DiskReport& p = parsed->disks[0];
  EXPECT_EQ(p.requested_regions, 1024u);
  EXPECT_EQ(p.given_back_regions, 1u);
  EXPECT_EQ(p.not_given_back_regions, 1u);
  EXPECT_EQ(p.sampled_window_free_regions, 600u);
  EXPECT_EQ(p.stopped, kStoppedNotGivenBack);
  EXPECT_FALSE(p.exhaustive);
  auto bad = [](auto mutate) {
    auto j = SampleJson();
    mutate(j["disks"][0]);
    return ParseAuditReport(j.dump()).ok();
  };
  EXPECT_TRUE(bad([](nlohmann::json&) {}));
  EXPECT_FALSE(bad([](nlohmann::json& d) { d["given_back_regions"] = 2; }));
  EXPECT_FALSE(bad([](nlohmann::json& d) { d["probe_writes"] = 4; }));
  EXPECT_FALSE(bad([](nlohmann::json& d) { d["sample"]["stopped"] = "bored"; }));
  EXPECT_FALSE(bad([](nlohmann::json& d) { d["sample"]["sampled_window_free_regions"] = 1; }));
  EXPECT_FALSE(bad([](nlohmann::json& d) { d["sample"]["sampled_windows"] = 2; }));
  EXPECT_FALSE(bad([](nlohmann::json& d) { d.erase("sample"); }));
  EXPECT_FALSE(bad([](nlohmann::json& d) { d["sample"]["exhaustive"] = 1; }));
}

TEST(ReportTest, StatesWhatTheSampleCanAndCannotRuleOut) {
  DiskReport d = SampleDisk();
  d.device_bytes = uint64_t{64} << 30;
  d.free_regions = 1000000;
  d.probed_regions = 1024;
  d.windows = 128;
  d.sampled_windows = 16;
  SampleStatement st = DescribeSample(d);
  EXPECT_NEAR(st.fraction_95, 0.00292, 0.00002);  // 1 - 0.05^(1/1024): the rule of three
  EXPECT_NE(st.can.find("0.29%"), std::string::npos) << st.can;
  EXPECT_NE(st.cannot.find("16 sampled 512 MiB windows (of 128)"), std::string::npos) << st.cannot;
  EXPECT_NE(st.cannot.find("among the 998976 free regions not probed"), std::string::npos) << st.cannot;
  EXPECT_NE(st.cannot.find("--exhaustive"), std::string::npos) << st.cannot;
  d.probed_regions = 64;
  EXPECT_GT(DescribeSample(d).fraction_95, 0.04);  // fewer probes rule out less
  d.exhaustive = true;
  d.probed_regions = d.free_regions;
  EXPECT_EQ(DescribeSample(d).fraction_95, 0);
  EXPECT_NE(DescribeSample(d).can.find("any free 64 KiB region"), std::string::npos);
  d.stopped = kStoppedTimeLimit;  // an exhaustive audit cut short is a sample, and says so
  d.probed_regions = 5000;
  EXPECT_GT(DescribeSample(d).fraction_95, 0);
  EXPECT_NE(DescribeSample(d).cannot.find("stopped early"), std::string::npos);
  d.probed_regions = 0;
  EXPECT_EQ(DescribeSample(d).fraction_95, 1);
  // The statement is in the text and in the JSON.
  AuditReport r;
  r.disks = {SampleDisk()};
  std::string text = RenderReport(r, DiskHistory::kUnknown);
  EXPECT_NE(text.find("rules out: "), std::string::npos) << text;
  EXPECT_NE(text.find("cannot rule out: "), std::string::npos) << text;
  EXPECT_NE(text.find("a random sample of 1024 asked"), std::string::npos) << text;
  EXPECT_NE(text.find("not given back (restored): 1"), std::string::npos) << text;
  auto j = ReportToJson(r);
  EXPECT_TRUE(j["disks"][0]["sample"]["can_rule_out"].is_string());
  EXPECT_TRUE(j["disks"][0]["sample"]["cannot_rule_out"].is_string());
  EXPECT_GT(j["disks"][0]["sample"]["rules_out_fraction_95"].get<double>(), 0.5);
}

TEST(ReportTest, TextSaysNoInUseBlockWasWrittenAndExplainsForeign) {
  AuditReport r;
  r.disks = {SampleDisk()};
  std::string fresh = RenderReport(r, DiskHistory::kFresh);
  EXPECT_NE(fresh.find("blocks in use written: 0"), std::string::npos);
  EXPECT_NE(fresh.find("foreign 100"), std::string::npos);
  EXPECT_NE(fresh.find("NOT CLEAN"), std::string::npos);
  EXPECT_NE(fresh.find("someone else's data"), std::string::npos);
  std::string used = RenderReport(r, DiskHistory::kUsed);
  EXPECT_NE(used.find("its own deleted files"), std::string::npos);
  EXPECT_EQ(used.find("someone else's data"), std::string::npos);
  AuditReport clean;
  clean.disks = {SampleDisk()};
  clean.disks[0].bytes.zero += clean.disks[0].bytes.foreign + clean.disks[0].bytes.unresolved;
  clean.disks[0].bytes.foreign = clean.disks[0].bytes.unresolved = 0;
  clean.disks[0].unresolved.clear();
  std::string ok = RenderReport(clean, DiskHistory::kUnknown);
  EXPECT_NE(ok.find("verdict: clean"), std::string::npos);
  EXPECT_EQ(ok.find("FOREIGN"), std::string::npos);
}

}  // namespace
}  // namespace cloister::audit
