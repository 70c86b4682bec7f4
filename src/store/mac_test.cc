#include "store/mac.h"

#include <gtest/gtest.h>

#include <set>

#include "store/test_util.h"

namespace cloister {
namespace {

TEST(MacTest, DerivedMacsAreLocalUnicastAndDeterministic) {
  for (const char* name : {"a", "dev", "claude", "codex-2"}) {
    for (uint32_t attempt = 0; attempt < 50; ++attempt) {
      std::string mac = DeriveMac(name, attempt);
      EXPECT_TRUE(IsLocalUnicastMac(mac)) << mac;
      EXPECT_EQ(mac, DeriveMac(name, attempt));
    }
  }
  EXPECT_NE(DeriveMac("a", 0), DeriveMac("b", 0));
  EXPECT_NE(DeriveMac("a", 0), DeriveMac("a", 1));
  EXPECT_FALSE(IsLocalUnicastMac("01:00:00:00:00:00"));  // multicast
  EXPECT_FALSE(IsLocalUnicastMac("00:11:22:33:44:55"));  // globally administered
  EXPECT_FALSE(IsLocalUnicastMac("02:11:22:33:44"));
}

TEST(MacTest, RegistryReservesResolvesCollisionsAndReleases) {
  testing::TempDir dir;
  MacRegistry reg(Env::Default(), dir.Sub("macs.json"));
  // Someone else already holds the first candidate for "dev".
  Result<std::string> other = reg.Reserve("squatter", "id-other");
  ASSERT_TRUE(other.ok());
  ASSERT_TRUE(Env::Default()
                  ->WriteFile(dir.Sub("macs.json"),
                              R"({"version":1,"entries":[{"mac":")" + DeriveMac("dev", 0) +
                                  R"(","workspace":"squatter","id":"id-other"}]})")
                  .ok());
  Result<std::string> mac = reg.Reserve("dev", "id-dev");
  ASSERT_TRUE(mac.ok());
  EXPECT_EQ(*mac, DeriveMac("dev", 1));
  // Idempotent for the same owner.
  EXPECT_EQ(*reg.Reserve("dev", "id-dev"), *mac);
  EXPECT_EQ(reg.Load()->size(), 2u);
  ASSERT_TRUE(reg.Release("id-other").ok());
  EXPECT_EQ(reg.Load()->size(), 1u);
  // A new workspace named dev (new id) gets the now free first candidate.
  EXPECT_EQ(*reg.Reserve("dev", "id-dev-2"), DeriveMac("dev", 0));
  Result<size_t> dropped = reg.Retain({"id-dev-2"});
  ASSERT_TRUE(dropped.ok());
  EXPECT_EQ(*dropped, 1u);
  EXPECT_EQ(reg.Load()->size(), 1u);
}

TEST(MacTest, DamagedRegistryIsAnError) {
  testing::TempDir dir;
  ASSERT_TRUE(Env::Default()->WriteFile(dir.Sub("macs.json"), "{\"entries\": 3}").ok());
  MacRegistry reg(Env::Default(), dir.Sub("macs.json"));
  Result<std::string> r = reg.Reserve("a", "id");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), ErrorCode::kCorrupt);
}

// Issue 15 item 13: two workspaces of one store never share a QEMU id, even when their MACs share
// the low 24 bits the id used to be derived from.
TEST(MacTest, QemuIdsAreUniqueEvenWhenMacsShareTheirLow24Bits) {
  testing::TempDir dir;
  MacRegistry reg(Env::Default(), dir.Sub("macs.json"));
  // A registry holding two MACs that differ only in their first three octets (as an older
  // registry could), without ids yet.
  ASSERT_TRUE(Env::Default()
                  ->WriteFile(dir.Sub("macs.json"),
                              R"({"version":1,"entries":[)"
                              R"({"mac":"02:aa:aa:12:34:56","workspace":"a","id":"id-a"},)"
                              R"({"mac":"06:bb:bb:12:34:56","workspace":"b","id":"id-b"}]})")
                  .ok());
  EXPECT_EQ(PreferredQemuId("02:aa:aa:12:34:56"), 0x123456u);
  auto a = reg.QemuIdOf("id-a");
  auto b = reg.QemuIdOf("id-b");
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(*a, 0x123456u);  // the first keeps the id it had
  EXPECT_NE(*a, *b);
  // Allocated once, stored, stable.
  EXPECT_EQ(*reg.QemuIdOf("id-b"), *b);
  auto loaded = reg.Load();
  ASSERT_TRUE(loaded.ok());
  for (const MacEntry& e : *loaded) EXPECT_TRUE(e.qemu_id.has_value()) << e.workspace;
  // A new reservation whose preferred id is taken gets another free one.
  ASSERT_TRUE(Env::Default()
                  ->WriteFile(dir.Sub("macs.json"),
                              R"({"version":1,"entries":[{"mac":"02:00:00:00:00:01","workspace":"x","id":"id-x","qemu_id":)" +
                                  std::to_string(PreferredQemuId(DeriveMac("dev", 0))) + "}]}")
                  .ok());
  auto mac = reg.Reserve("dev", "id-dev");
  ASSERT_TRUE(mac.ok());
  EXPECT_EQ(*mac, DeriveMac("dev", 0));
  EXPECT_NE(*reg.QemuIdOf("id-dev"), *reg.QemuIdOf("id-x"));
  EXPECT_EQ(reg.QemuIdOf("id-nobody").error().code(), ErrorCode::kNotFound);
}

TEST(MacTest, ManyWorkspacesGetDistinctQemuIds) {
  testing::TempDir dir;
  MacRegistry reg(Env::Default(), dir.Sub("macs.json"));
  std::set<uint32_t> ids;
  for (int i = 0; i < 200; ++i) {
    std::string id = "id-" + std::to_string(i);
    ASSERT_TRUE(reg.Reserve("ws" + std::to_string(i), id).ok());
    auto q = reg.QemuIdOf(id);
    ASSERT_TRUE(q.ok());
    EXPECT_LT(*q, kQemuIdSpace);
    EXPECT_TRUE(ids.insert(*q).second) << "duplicate QEMU id " << *q;
  }
}

TEST(MacTest, ARegistryWithADuplicateQemuIdIsRefused) {
  testing::TempDir dir;
  ASSERT_TRUE(Env::Default()
                  ->WriteFile(dir.Sub("macs.json"),
                              R"({"version":1,"entries":[)"
                              R"({"mac":"02:aa:aa:12:34:56","workspace":"a","id":"id-a","qemu_id":7},)"
                              R"({"mac":"02:bb:bb:12:34:57","workspace":"b","id":"id-b","qemu_id":7}]})")
                  .ok());
  MacRegistry reg(Env::Default(), dir.Sub("macs.json"));
  auto q = reg.QemuIdOf("id-b");
  ASSERT_FALSE(q.ok());
  EXPECT_EQ(q.error().code(), ErrorCode::kCorrupt);
}

}  // namespace
}  // namespace cloister

namespace cloister {
namespace {

TEST(MacTest, NoWorkspaceGetsTheBuildersQemuId) {
  // SECURITY: a workspace whose MAC prefers the builders' id gets another: a builder VM's QEMU
  // never runs under a workspace QEMU's uid.
  testing::TempDir dir;
  MacRegistry reg(Env::Default(), dir.Sub("macs.json"));
  char mac[18];
  std::snprintf(mac, sizeof mac, "02:aa:aa:%02x:%02x:%02x", (kBuilderQemuId >> 16) & 0xff,
                (kBuilderQemuId >> 8) & 0xff, kBuilderQemuId & 0xff);
  ASSERT_EQ(PreferredQemuId(mac), kBuilderQemuId);
  ASSERT_TRUE(Env::Default()
                  ->WriteFile(dir.Sub("macs.json"),
                              std::string(R"({"version":1,"entries":[{"mac":")") + mac +
                                  R"(","workspace":"w","id":"id-w"}]})")
                  .ok());
  auto q = reg.QemuIdOf("id-w");
  ASSERT_TRUE(q.ok()) << q.error().ToString();
  EXPECT_NE(*q, kBuilderQemuId);
}

}  // namespace
}  // namespace cloister
