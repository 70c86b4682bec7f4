// Guest-chosen text on the user's terminal (issue 37 item 7): every CLI output that can carry it
// (trace ls/leaks/summary, describe, ls notes, error messages) goes through base/terminal_text.h,
// so no terminal control (ESC, C0, C1 raw or UTF-8 encoded) reaches the terminal; --json keeps the
// text as it was (JSON-escaped).
#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

#include "cli/cli.h"
#include "cli/testing.h"
#include "proxy/trace.h"
#include "store/store.h"

namespace cloister::cli {
namespace {

// The hostile text: CSI as ESC [ and as UTF-8 encoded U+009B, OSC 52 (clipboard write) as U+009D,
// BEL, a carriage return (valid UTF-8: what a JSON file keeps), and with a raw C1 byte too.
const std::string kHostileUtf8 = "/x\x1b[2J\xc2\x9b" "31m\xc2\x9d" "52;c;cHduZWQ=\x07\rend";
const std::string kHostile = kHostileUtf8 + "\x9b" "7m";

// The first terminal control in `s` (as an offset), or npos: C0 but \n and \t, DEL, a raw byte
// 0x80..0x9f, or U+0080..U+009F encoded in UTF-8.
size_t FirstControl(const std::string& s) {
  for (size_t i = 0; i < s.size(); ++i) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    if ((c < 0x20 && c != '\n' && c != '\t') || c == 0x7f) return i;
    if (c == 0xc2 && i + 1 < s.size()) {
      unsigned char n = static_cast<unsigned char>(s[i + 1]);
      if (n >= 0x80 && n <= 0x9f) return i;
      ++i;  // a valid two-byte form from U+00A0
      continue;
    }
    if (c >= 0x80 && c <= 0x9f) return i;  // not a UTF-8 lead byte: a raw C1 byte
    if (c >= 0xc3) {                        // a longer sequence: skip its continuation bytes
      while (i + 1 < s.size() && (static_cast<unsigned char>(s[i + 1]) & 0xc0) == 0x80) ++i;
    }
  }
  return std::string::npos;
}

class TerminalSafetyTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_EQ(store_.CreateWorkspace("dev"), ""); }
  void ExpectSafe(const std::vector<std::string>& args, int want_code = 0) {
    testing::Outcome r = store_.Run(args);
    EXPECT_EQ(r.code, want_code) << args[0] << ": " << r.err;
    for (const std::string* s : {&r.out, &r.err}) {
      size_t at = FirstControl(*s);
      EXPECT_EQ(at, std::string::npos)
          << args[0] << " " << (args.size() > 1 ? args[1] : "") << " printed a terminal control at "
          << at << ": " << s->substr(at == std::string::npos ? 0 : at, 16);
    }
  }
  testing::TempStore store_{"termsafe"};
};

TEST_F(TerminalSafetyTest, TraceLsLeaksAndSummaryEscapeGuestText) {
  proxy::TraceRecord r;
  r.time_ms = 1700000000000;
  r.host = "api.github.com" + kHostile;
  r.method = "GET\x1b]0;t\x07";
  r.path = kHostile;
  r.status = 451;
  r.error = "upstream said " + kHostile;
  r.mode = "transparent" + kHostile;
  r.swaps = {"github" + kHostile};
  r.leaks = {{"github", "header:x" + kHostile, "raw", "blocked"}};
  r.blocked = true;
  {
    auto sink = proxy::TraceSink::Open(store_.root() + "/workspaces/dev/trace.jsonl");
    ASSERT_TRUE(sink.ok());
    (*sink)->Write(r);
  }
  ExpectSafe({"trace", "ls", "dev"});
  ExpectSafe({"trace", "summary", "dev"});
  ExpectSafe({"trace", "leaks", "dev"}, kExitError);  // a blocked leak: exit 1
  // What was escaped is still there to read.
  testing::Outcome ls = store_.Run({"trace", "ls", "dev"});
  EXPECT_NE(ls.out.find("\\x1b[2J\\xc2\\x9b31m"), std::string::npos) << ls.out;
  // --json is for programs: the text as the trace holds it, JSON-escaped (ESC as \u001b).
  testing::Outcome js = store_.Run({"trace", "ls", "dev", "--json"});
  ASSERT_EQ(js.code, 0);
  auto doc = js.json();
  ASSERT_TRUE(doc.is_array());
  EXPECT_EQ(doc[0]["path"].get<std::string>().rfind(kHostileUtf8, 0), 0u) << js.out;
}

TEST_F(TerminalSafetyTest, DescribeLsAndErrorsEscapeGuestText) {
  {
    auto store = Store::Open(store_.root());
    ASSERT_TRUE(store.ok());
    // The compromise reason names where a placeholder went: the guest's choice of host.
    ASSERT_TRUE((*store)
                    ->UpdateConfig("dev",
                                   [](WorkspaceConfig& c) {
                                     c.compromised = true;
                                     c.compromised_reason = "github placeholder sent to " + kHostileUtf8;
                                     return OkStatus();
                                   })
                    .ok());
  }
  ExpectSafe({"describe", "dev"});
  ExpectSafe({"ls"});
  // An error message that quotes guest text (Cli::Fail).
  std::ostringstream out, err;
  std::istringstream in;
  Cli cli(out, err, in);
  cli.Fail(Error(ErrorCode::kCorrupt, "the agent said " + kHostile, "hint " + kHostile));
  EXPECT_EQ(FirstControl(err.str()), std::string::npos) << err.str();
}

}  // namespace
}  // namespace cloister::cli
