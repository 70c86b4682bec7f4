#include "store/mac.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace cloister
