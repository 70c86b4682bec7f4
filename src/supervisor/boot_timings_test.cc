#include "supervisor/boot_timings.h"

#include <gtest/gtest.h>

namespace cloister::vm {
namespace {

TEST(BootTimingsTest, GuestMarksRoundTripInsideTheReadyText) {
  GuestMarks m{1200, 9800, 10100, 10400, 10650};
  std::string info = "cloister-agent 1 boot abc" + FormatGuestMarks(m);
  EXPECT_EQ(info, "cloister-agent 1 boot abc timings init=1200 agent=9800 setup=10100 "
                  "probe=10400 ready=10650");
  auto got = ParseGuestMarks(info);
  ASSERT_TRUE(got.ok()) << got.error().ToString();
  EXPECT_EQ(got->init, 1200);
  EXPECT_EQ(got->agent, 9800);
  EXPECT_EQ(got->setup, 10100);
  EXPECT_EQ(got->probe, 10400);
  EXPECT_EQ(got->ready, 10650);
}

// SECURITY: the READY text is the guest's; every malformed form is refused, never half-read.
TEST(BootTimingsTest, HostileGuestMarksAreRefused) {
  const std::string ok = " timings init=1 agent=2 setup=3 probe=4 ready=5";
  ASSERT_TRUE(ParseGuestMarks("x" + ok).ok());
  for (const std::string& bad : {
           std::string("cloister-agent 1 boot abc"),                        // none reported
           std::string(" timings init=1 agent=2 setup=3 probe=4"),          // one missing
           std::string(" timings agent=2 init=1 setup=3 probe=4 ready=5"),  // out of order
           std::string(" timings init=5 agent=2 setup=3 probe=4 ready=5"),  // goes backwards
           std::string(" timings init=1 agent=2 setup=3 probe=4 ready=5x"),  // trailing bytes
           std::string(" timings init=1 agent=2 setup=3 probe=4 ready=12345678901"),  // 11 digits
           std::string(" timings init=-1 agent=2 setup=3 probe=4 ready=5"),
           std::string(" timings init= agent=2 setup=3 probe=4 ready=5"),
           std::string(" timings init=1  agent=2 setup=3 probe=4 ready=5"),
           std::string(" timings init=1 agent=2 setup=3 probe=4 ready="),
           std::string(" timings init"),
           std::string(5000, 'a') + ok,  // over the bound
       }) {
    EXPECT_FALSE(ParseGuestMarks(bad).ok()) << bad.substr(0, 80);
  }
}

TEST(BootTimingsTest, TimingsLineRoundTripsAndRefusesGarbage) {
  std::vector<BootPhase> p = {{"disks", 12}, {"proxy", 40}, {"metadata-disk", 310}};
  std::string line = FormatTimingsLine(p);
  EXPECT_EQ(line, "timings disks=12 proxy=40 metadata-disk=310");
  auto got = ParseTimingsLine(line);
  ASSERT_TRUE(got.ok()) << got.error().ToString();
  EXPECT_EQ(*got, p);
  EXPECT_TRUE(ParseTimingsLine("timings")->empty());
  for (const char* bad : {"timing disks=1", "timings disks", "timings Disks=1", "timings a=",
                          "timings a=1 ", "timings  a=1", "timings a=1x"}) {
    EXPECT_FALSE(ParseTimingsLine(bad).ok()) << bad;
  }
}

TEST(BootTimingsTest, GuestPhasesSplitTheHostSpanAndTheTableListsThemWithTheTotal) {
  GuestMarks m{1000, 9000, 9500, 9800, 10000};
  auto phases = GuestPhases(m, 10700);
  std::vector<BootPhase> want = {{"firmware", 700},    {"kernel", 1000},
                                 {"init-to-hook", 8000}, {"agent-setup", 500},
                                 {"terminal-probe", 300}, {"to-ready", 200}};
  EXPECT_EQ(phases, want);
  EXPECT_EQ(GuestPhases(m, 9000).front().second, 0);  // clock skew: never negative
  std::string t = FormatTimingsTable({{"disks", 5}, {"kernel", 1000}}, 1234);
  EXPECT_EQ(t, "PHASE                   MS\n"
               "disks                    5\n"
               "kernel                1000\n"
               "total                 1234\n");
}

}  // namespace
}  // namespace cloister::vm
