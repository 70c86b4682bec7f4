#include "channel/frame.h"

#include <gtest/gtest.h>

namespace cloister::channel {
namespace {

std::vector<Frame> DecodeAll(const std::string& bytes, size_t chunk) {
  FrameDecoder d;
  std::vector<Frame> out;
  for (size_t i = 0; i < bytes.size(); i += chunk) {
    d.Feed(std::string_view(bytes).substr(i, chunk));
    while (true) {
      auto f = d.Next();
      EXPECT_TRUE(f.ok()) << f.error().message();
      if (!f.ok() || !f->has_value()) break;
      out.push_back(std::move(**f));
    }
  }
  return out;
}

TEST(FrameTest, RoundTripsEveryTypeWholeAndByteByByte) {
  std::string bytes;
  EncodeFrame(FrameType::kHello, 0, EncodeHello(0x0123456789abcdefULL), bytes);
  auto open = EncodeOpen({"exec", {"a", "", std::string(100, 'x')}});
  ASSERT_TRUE(open.ok());
  EncodeFrame(FrameType::kOpen, 1, *open, bytes);
  EncodeFrame(FrameType::kOpenOk, 1, "", bytes);
  EncodeFrame(FrameType::kData, 1, std::string(kMaxPayload, 'd'), bytes);
  EncodeFrame(FrameType::kWindow, 2, EncodeWindow(4096), bytes);
  EncodeFrame(FrameType::kEof, 1, "", bytes);
  EncodeFrame(FrameType::kClose, 1, "", bytes);
  EncodeFrame(FrameType::kReady, 0, "agent 1", bytes);
  for (size_t chunk : {bytes.size(), size_t{1}, size_t{7}}) {
    auto frames = DecodeAll(bytes, chunk);
    ASSERT_EQ(frames.size(), 8u);
    EXPECT_EQ(frames[0].type, FrameType::kHello);
    EXPECT_EQ(*ParseHello(frames[0].payload), 0x0123456789abcdefULL);
    auto req = ParseOpen(frames[1].payload);
    ASSERT_TRUE(req.ok());
    EXPECT_EQ(req->service, "exec");
    EXPECT_EQ(req->args, (std::vector<std::string>{"a", "", std::string(100, 'x')}));
    EXPECT_EQ(frames[3].payload.size(), kMaxPayload);
    EXPECT_EQ(*ParseWindow(frames[4].payload), 4096u);
    EXPECT_EQ(frames[4].stream, 2u);
    EXPECT_EQ(frames[7].payload, "agent 1");
  }
}

Error DecodeError(const std::string& bytes) {
  FrameDecoder d;
  d.Feed(bytes);
  auto f = d.Next();
  EXPECT_FALSE(f.ok());
  return f.ok() ? Error(ErrorCode::kInternal, "decoded") : f.error();
}

std::string RawHeader(uint32_t len, uint32_t stream, uint8_t type) {
  std::string h;
  for (int i = 3; i >= 0; --i) h.push_back(static_cast<char>(len >> (8 * i)));
  for (int i = 3; i >= 0; --i) h.push_back(static_cast<char>(stream >> (8 * i)));
  h.push_back(static_cast<char>(type));
  return h;
}

TEST(FrameTest, RejectsOversizedLengthBeforeBufferingPayload) {
  Error e = DecodeError(RawHeader(0xffffffffu, 1, 5));
  EXPECT_EQ(e.code(), ErrorCode::kCorrupt);
  EXPECT_NE(e.message().find("exceeds"), std::string::npos);
  EXPECT_EQ(DecodeError(RawHeader(kMaxPayload + 1, 1, 5)).code(), ErrorCode::kCorrupt);
}

TEST(FrameTest, RejectsUnknownTypesWrongStreamsAndBadSizes) {
  EXPECT_NE(DecodeError(RawHeader(0, 1, 0)).message().find("unknown frame type"), std::string::npos);
  EXPECT_NE(DecodeError(RawHeader(0, 1, 99)).message().find("unknown frame type"), std::string::npos);
  EXPECT_NE(DecodeError(RawHeader(16, 3, 1)).message().find("wrong stream"), std::string::npos);
  EXPECT_NE(DecodeError(RawHeader(1, 0, 5)).message().find("wrong stream"), std::string::npos);
  EXPECT_NE(DecodeError(RawHeader(0, 1, 5)).message().find("empty DATA"), std::string::npos);
  EXPECT_NE(DecodeError(RawHeader(3, 1, 6)).message().find("WINDOW"), std::string::npos);
  EXPECT_NE(DecodeError(RawHeader(1, 1, 7)).message().find("no payload"), std::string::npos);
  EXPECT_NE(DecodeError(RawHeader(kMaxReasonLen + 1, 0, 10)).message().find("too long"),
            std::string::npos);
}

TEST(FrameTest, DecoderStaysFailedAfterAnError) {
  FrameDecoder d;
  d.Feed(RawHeader(0, 1, 42));
  EXPECT_FALSE(d.Next().ok());
  std::string good;
  EncodeFrame(FrameType::kEof, 1, "", good);
  d.Feed(good);
  EXPECT_FALSE(d.Next().ok());
}

TEST(FrameTest, ParseOpenIsBounded) {
  auto ok = EncodeOpen({"proxy", {}});
  ASSERT_TRUE(ok.ok());
  EXPECT_TRUE(ParseOpen(*ok).ok());
  EXPECT_FALSE(ParseOpen(*ok + "x").ok());                      // trailing bytes
  EXPECT_FALSE(ParseOpen(ok->substr(0, ok->size() - 1)).ok());  // truncated
  EXPECT_FALSE(ParseOpen(std::string("\x00\x03" "A/b\x00\x00", 7)).ok());  // bad name
  EXPECT_FALSE(ParseOpen(std::string("\x00\x01" "a\xff\xff", 5)).ok());   // argc too big
  // An argument claiming more bytes than present.
  EXPECT_FALSE(ParseOpen(std::string("\x00\x01" "a\x00\x01\x10\x00" "ab", 9)).ok());
  EXPECT_FALSE(EncodeOpen({"Bad Name", {}}).ok());
  EXPECT_FALSE(EncodeOpen({"x", std::vector<std::string>(kMaxOpenArgs + 1)}).ok());
}

TEST(FrameTest, HelloChecksMagicAndVersion) {
  std::string h = EncodeHello(42);
  EXPECT_EQ(*ParseHello(h), 42u);
  std::string bad_magic = h;
  bad_magic[0] = 'X';
  EXPECT_EQ(ParseHello(bad_magic).error().code(), ErrorCode::kCorrupt);
  std::string v2 = h;
  v2[7] = 2;
  EXPECT_EQ(ParseHello(v2).error().code(), ErrorCode::kFailedPrecondition);
  EXPECT_FALSE(ParseHello(h.substr(0, 7)).ok());
}

TEST(FrameTest, FindsHelloAfterStaleBytesAndKeepsPartialOnes) {
  std::string hello;
  EncodeFrame(FrameType::kHello, 0, EncodeHello(7), hello);
  std::string stale = "\x00\x00\x10\x00\x00\x00\x00\x02\x05garbage";
  size_t keep = 99;
  auto at = FindHelloFrame(stale + hello + "tail", &keep);
  ASSERT_TRUE(at.has_value());
  EXPECT_EQ(*at, stale.size());
  EXPECT_EQ(*ParseHello(std::string_view(stale + hello).substr(*at + kHeaderSize, 16)), 7u);
  // A HELLO cut in half is not found, and its beginning is kept for the next search.
  EXPECT_FALSE(FindHelloFrame(stale + hello.substr(0, 20), &keep).has_value());
  EXPECT_EQ(keep, 20u);
  EXPECT_FALSE(FindHelloFrame(std::string(1000, 'x'), &keep).has_value());
  EXPECT_EQ(keep, 12u);
}

TEST(FrameTest, WindowRangeAndTextSanitizing) {
  EXPECT_FALSE(ParseWindow(EncodeWindow(0)).ok());
  EXPECT_FALSE(ParseWindow(EncodeWindow(kMaxWindow + 1)).ok());
  EXPECT_EQ(*ParseWindow(EncodeWindow(kMaxWindow)), kMaxWindow);
  EXPECT_EQ(SanitizeText("a\nb\x1b[31m"), "a?b?[31m");
  EXPECT_EQ(SanitizeText(std::string(10000, 'z')).size(), kMaxReasonLen);
}

}  // namespace
}  // namespace cloister::channel
