#include "base/json_util.h"

#include <gtest/gtest.h>

namespace cloister {
namespace {

using nlohmann::json;

TEST(JsonIntTest, TakesOnlyIntegersThatFit) {
  json j = json::parse(R"({"a": 7, "neg": -3, "big": 70000, "huge": 18446744073709551615,
                            "float": 1e21, "half": 2.5, "s": "5", "b": true, "n": null})");
  EXPECT_EQ(JsonInt<int>(j, "a", -1), 7);
  EXPECT_EQ(JsonInt<int64_t>(j, "neg", 0), -3);
  EXPECT_EQ(JsonInt<uint16_t>(j, "big", 1), 1);  // out of range: the fallback, not 70000 mod 2^16
  EXPECT_EQ(JsonInt<uint32_t>(j, "big", 1), 70000u);
  EXPECT_EQ(JsonInt<uint64_t>(j, "huge", 0), UINT64_MAX);
  EXPECT_EQ(JsonInt<int64_t>(j, "huge", 9), 9);  // above INT64_MAX
  EXPECT_EQ(JsonInt<uint64_t>(j, "neg", 9), 9u);  // negative into unsigned
  // The fuzz finding: a float far outside int64_t's range (static_cast would be UB).
  EXPECT_EQ(JsonInt<int64_t>(j, "float", 4), 4);
  EXPECT_EQ(JsonInt<int>(j, "half", 4), 4);
  EXPECT_EQ(JsonInt<int>(j, "s", 4), 4);
  EXPECT_EQ(JsonInt<int>(j, "b", 4), 4);
  EXPECT_EQ(JsonInt<int>(j, "n", 4), 4);
  EXPECT_EQ(JsonInt<int>(j, "absent", 4), 4);
  EXPECT_EQ(JsonInt<int>(json::array({1}), "a", 4), 4);
  EXPECT_EQ(JsonIntOf<int8_t>(json(-128)), std::optional<int8_t>(-128));
  EXPECT_EQ(JsonIntOf<int8_t>(json(-129)), std::nullopt);
}

}  // namespace
}  // namespace cloister
