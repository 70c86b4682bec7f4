#include "base/result.h"

#include <cerrno>
#include <memory>
#include <string>

#include <gtest/gtest.h>

namespace cloister {
namespace {

Result<int> Half(int x) {
  if (x % 2) return Error(ErrorCode::kInvalidArgument, "odd", "pass an even number");
  return x / 2;
}

Result<int> Quarter(int x) {
  ASSIGN_OR_RETURN(int h, Half(x));
  ASSIGN_OR_RETURN(int q, Half(h));
  return q;
}

Status CheckEven(int x) {
  RETURN_IF_ERROR(Half(x));
  return OkStatus();
}

TEST(ResultTest, ValueAndErrorPropagate) {
  ASSERT_TRUE(Quarter(8).ok());
  EXPECT_EQ(*Quarter(8), 2);
  Result<int> r = Quarter(6);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(r.error().ToString(), "odd (Hint: pass an even number)");
  EXPECT_TRUE(CheckEven(4).ok());
  EXPECT_FALSE(CheckEven(3).ok());
}

TEST(ResultTest, MoveOnlyValues) {
  Result<std::unique_ptr<int>> r = std::make_unique<int>(7);
  ASSERT_TRUE(r.ok());
  std::unique_ptr<int> p = std::move(r).value();
  EXPECT_EQ(*p, 7);
}

TEST(ResultTest, StringFromLiteral) {
  Result<std::string> r = "abc";
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, "abc");
}

TEST(ResultTest, ErrnoMapping) {
  EXPECT_EQ(ErrnoError("write", ENOSPC).code(), ErrorCode::kNoSpace);
  EXPECT_FALSE(ErrnoError("write", ENOSPC).hint().empty());
  EXPECT_EQ(ErrnoError("open", ENOENT).code(), ErrorCode::kNotFound);
  EXPECT_EQ(ErrnoError("open", EACCES).code(), ErrorCode::kPermissionDenied);
  EXPECT_EQ(ErrnoError("read", EIO).code(), ErrorCode::kIo);
  EXPECT_NE(ErrnoError("open", ENOENT).message().find("open: "), std::string::npos);
  EXPECT_EQ(Error(ErrorCode::kIo, "x").WithContext("ctx").message(), "ctx: x");
}

}  // namespace
}  // namespace cloister
