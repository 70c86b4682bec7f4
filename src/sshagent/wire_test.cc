#include "sshagent/wire.h"

#include <gtest/gtest.h>

namespace cloister::sshagent {
namespace {

TEST(SshWireTest, RoundTripsStringsAndIntegers) {
  std::string enc = SshWriter().Byte(7).Uint32(0x01020304).String("hello").String("").Take();
  EXPECT_EQ(enc, std::string("\x07\x01\x02\x03\x04\x00\x00\x00\x05hello\x00\x00\x00\x00", 18));
  SshReader r(enc);
  EXPECT_EQ(*r.Byte(), 7);
  EXPECT_EQ(*r.Uint32(), 0x01020304u);
  EXPECT_EQ(*r.String(), "hello");
  EXPECT_EQ(*r.String(), "");
  EXPECT_TRUE(r.ExpectEnd("x").ok());
}

TEST(SshWireTest, StringLongerThanDataIsCorrupt) {
  std::string enc = SshWriter().Uint32(100).Raw("short").Take();
  SshReader r(enc);
  auto s = r.String();
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().code(), ErrorCode::kCorrupt);
}

TEST(SshWireTest, StringOverLimitIsRejectedBeforeReading) {
  std::string enc = SshWriter().String(std::string(40, 'a')).Take();
  SshReader r(enc);
  auto s = r.String(39);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message().find("exceeds limit"), std::string::npos);
}

TEST(SshWireTest, HugeDeclaredLengthDoesNotOverflow) {
  std::string enc("\xff\xff\xff\xff", 4);
  SshReader r(enc);
  EXPECT_FALSE(r.String(SIZE_MAX).ok());
}

TEST(SshWireTest, TruncatedIntegersAndTrailingBytes) {
  SshReader r(std::string_view("\x00\x01", 2));
  EXPECT_FALSE(r.Uint32().ok());
  SshReader r2(std::string_view("ab"));
  ASSERT_TRUE(r2.Byte().ok());
  EXPECT_FALSE(r2.ExpectEnd("msg").ok());
  SshReader r3(std::string_view(""));
  EXPECT_FALSE(r3.Byte().ok());
}

}  // namespace
}  // namespace cloister::sshagent
