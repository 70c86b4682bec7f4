#include "base/terminal_text.h"

#include <gtest/gtest.h>

namespace cloister {
namespace {

// SECURITY: no byte that starts a terminal escape survives.
TEST(TerminalSafeTest, EscapesControlSequences) {
  EXPECT_EQ(TerminalSafe("a\x1b]0;pwned\x07z"), "a\\x1b]0;pwned\\x07z");
  EXPECT_EQ(TerminalSafe("\x1b[2J"), "\\x1b[2J");
  EXPECT_EQ(TerminalSafe("del\x7f"), "del\\x7f");
  // C1 CSI, raw and UTF-8 encoded (U+009B).
  EXPECT_EQ(TerminalSafe("\x9b" "31m"), "\\x9b31m");
  EXPECT_EQ(TerminalSafe("\xc2\x9b" "31m"), "\\xc2\\x9b31m");
  // Overlong ESC (C0 80 / E0 80 9B), a surrogate, a truncated sequence.
  EXPECT_EQ(TerminalSafe("\xc0\x9b"), "\\xc0\\x9b");
  EXPECT_EQ(TerminalSafe("\xe0\x80\x9b"), "\\xe0\\x80\\x9b");
  EXPECT_EQ(TerminalSafe("\xed\xa0\x80"), "\\xed\\xa0\\x80");
  EXPECT_EQ(TerminalSafe("\xe2\x82"), "\\xe2\\x82");
  // Every C1 control, UTF-8 encoded; ESC; a right-to-left override (U+202E) and isolate (U+2066).
  for (unsigned c = 0x80; c <= 0x9f; ++c) {
    std::string enc = {static_cast<char>(0xc2), static_cast<char>(c)};
    EXPECT_EQ(TerminalSafe(enc).find(enc), std::string::npos) << c;
  }
  EXPECT_EQ(TerminalSafe("\x1b"), "\\x1b");
  EXPECT_EQ(TerminalSafe("a\xe2\x80\xaez"), "a\\xe2\\x80\\xaez");
  EXPECT_EQ(TerminalSafe("\xe2\x81\xa6"), "\\xe2\\x81\\xa6");
}

TEST(TerminalSafeTest, KeepsText) {
  EXPECT_EQ(TerminalSafe("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x90\xa7"), "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x90\xa7");
  EXPECT_EQ(TerminalSafe("a\tb\r\nc\n", true), "a\tb\nc\n");
  EXPECT_EQ(TerminalSafe("a\tb\nc"), "a\\x09b\\x0ac");
  EXPECT_EQ(TerminalSafe("lone\rcr", true), "lone\\x0dcr");
}

}  // namespace
}  // namespace cloister
