#include "base/strings.h"

#include <gtest/gtest.h>

namespace cloister {
namespace {

TEST(StringsTest, SplitTrimJoin) {
  EXPECT_EQ(Split("a:b::c", ':'), (std::vector<std::string>{"a", "b", "", "c"}));
  EXPECT_EQ(Trim("  x y \n"), "x y");
  EXPECT_EQ(Join({"a", "b"}, ", "), "a, b");
  EXPECT_TRUE(StartsWith("cloister", "clo"));
  EXPECT_TRUE(EndsWith("disk.qcow2", ".qcow2"));
  EXPECT_FALSE(EndsWith("a", "abc"));
}

TEST(StringsTest, ParseSize) {
  EXPECT_EQ(*ParseSize("4096"), 4096u);
  EXPECT_EQ(*ParseSize("64G"), 64ull << 30);
  EXPECT_EQ(*ParseSize("64GiB"), 64ull << 30);
  EXPECT_EQ(*ParseSize("512m"), 512ull << 20);
  EXPECT_EQ(*ParseSize("1.5K"), 1536u);
  EXPECT_FALSE(ParseSize("").ok());
  EXPECT_FALSE(ParseSize("G").ok());
  EXPECT_FALSE(ParseSize("12X").ok());
  EXPECT_FALSE(ParseSize("-5G").ok());
  EXPECT_FALSE(ParseSize("1.2.3").ok());
}

TEST(StringsTest, FormatSize) {
  EXPECT_EQ(FormatSize(0), "0 B");
  EXPECT_EQ(FormatSize(1536), "1.5 KiB");
  EXPECT_EQ(FormatSize(64ull << 30), "64 GiB");
}

TEST(StringsTest, Hex) {
  EXPECT_EQ(HexEncode(std::string("\x00\xff\x10", 3)), "00ff10");
  EXPECT_EQ(*HexDecode("00FF10"), std::string("\x00\xff\x10", 3));
  EXPECT_FALSE(HexDecode("abc").ok());
  EXPECT_FALSE(HexDecode("zz").ok());
}

}  // namespace
}  // namespace cloister
