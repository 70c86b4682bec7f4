#include "lifecycle/lifecycle.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <iostream>
#include <set>
#include <string>

namespace cloister::lifecycle {
namespace {

State StateAt(size_t i) { return static_cast<State>(i); }
Action ActionAt(size_t i) { return static_cast<Action>(i); }

bool IsEvent(Action a) {
  return a == Action::kReady || a == Action::kQemuExited || a == Action::kCompromised || a == Action::kChannelClosed;
}

char Letter(const Rule& r) {
  switch (r.verdict) {
    case Verdict::kGo: return 'G';
    case Verdict::kAlready: return 'A';
    case Verdict::kWaitReady: return 'W';
    case Verdict::kDeferred: return 'L';
    case Verdict::kRefuse: return 'r';
  }
  return '?';
}

// The table as a grid of verdict letters, one row per state, actions in enum order.
std::string Grid() {
  std::string g;
  for (size_t s = 0; s < kStateCount; ++s) {
    g += std::string(StateName(StateAt(s))) + ":";
    for (size_t a = 0; a < kActionCount; ++a) g.push_back(Letter(Lookup(StateAt(s), ActionAt(a))));
    g += "\n";
  }
  return g;
}

TEST(LifecycleTest, NamesAreDistinctAndRoundTrip) {
  std::set<std::string> states, actions;
  for (size_t s = 0; s < kStateCount; ++s) {
    std::string n = StateName(StateAt(s));
    EXPECT_NE(n, "unknown");
    EXPECT_TRUE(states.insert(n).second) << n;
    auto back = StateFromName(n);
    ASSERT_TRUE(back.has_value()) << n;
    EXPECT_EQ(*back, StateAt(s));
  }
  for (size_t a = 0; a < kActionCount; ++a) {
    std::string n = ActionName(ActionAt(a));
    EXPECT_NE(n, "unknown");
    EXPECT_TRUE(actions.insert(n).second) << n;
    EXPECT_STRNE(ActionVerb(ActionAt(a)), "act on");
  }
  EXPECT_FALSE(StateFromName("Running").has_value());
  EXPECT_FALSE(StateFromName("").has_value());
  EXPECT_FALSE(StateFromName("running ").has_value());
  EXPECT_STREQ(StateName(StateAt(kStateCount)), "unknown");
}

// Every (state, action) pair is defined, and each cell is well formed.
TEST(LifecycleTest, EveryPairIsDefinedAndWellFormed) {
  for (size_t s = 0; s < kStateCount; ++s) {
    for (size_t a = 0; a < kActionCount; ++a) {
      State st = StateAt(s);
      Action ac = ActionAt(a);
      const Rule& r = Lookup(st, ac);
      std::string where = std::string(StateName(st)) + " x " + ActionName(ac);
      auto d = Decide(st, ac, "ws", "why");
      if (r.verdict == Verdict::kRefuse) {
        ASSERT_FALSE(d.ok()) << where;
        EXPECT_FALSE(r.message.empty()) << where;
        EXPECT_NE(r.code, ErrorCode::kInternal) << where;
        // A user-facing refusal carries the hint that fixes it; events have no user.
        if (!IsEvent(ac)) {
          EXPECT_FALSE(r.hint.empty()) << where;
        }
        const Error& e = d.error();
        EXPECT_EQ(e.code(), r.code) << where;
        EXPECT_EQ(e.message().find('{'), std::string::npos) << where << ": " << e.message();
        EXPECT_EQ(e.hint().find('{'), std::string::npos) << where << ": " << e.hint();
        // It names the workspace or the state it is in.
        bool names = e.message().find("ws") != std::string::npos ||
                     e.message().find(StateName(st)) != std::string::npos;
        EXPECT_TRUE(names) << where << ": " << e.message();
      } else {
        ASSERT_TRUE(d.ok()) << where;
        EXPECT_EQ(d->verdict, r.verdict) << where;
        EXPECT_LT(static_cast<size_t>(r.next), kStateCount) << where;
        EXPECT_TRUE(r.message.empty()) << where;
        if (r.verdict != Verdict::kGo) {
          EXPECT_EQ(r.next, st) << where;
        }
        if (r.verdict == Verdict::kDeferred || r.verdict == Verdict::kWaitReady) {
          EXPECT_TRUE(IsLive(st)) << where;
        }
        EXPECT_EQ(Refusal(st, ac, "ws").code(), ErrorCode::kInternal) << where;
      }
    }
  }
  // Out of range: refused, never a read past the table.
  EXPECT_FALSE(Decide(StateAt(kStateCount), Action::kStatus, "ws").ok());
  EXPECT_FALSE(Decide(State::kRunning, ActionAt(kActionCount), "ws").ok());
}

// The whole table pinned: G go, A already, W wait for READY, L applies at next start,
// r refused. Columns: start ready qemu-exited channel-closed stop force-stop suspend reboot compromise | exec
// attach status ssh-confirm | config cred | reset wipe-home wipe rm checkpoint restore
// checkpoint-rm prune live-checkpoint. A changed cell must change this grid (and docs/design.md's table).
TEST(LifecycleTest, TableIsPinned) {
  const std::string expected =
      "stopped:GrrrAArrrrrGrGGGGGGGGGGr\n"
      "booting:WGGGGGrrGWWGGLLrrrrrrrrr\n"
      "running:ArGGGGGGGGGGGLLrrrrrrrrG\n"
      "paused:rrGGGGrrArrGGLLrrGrrrrrr\n"
      "stopping:rrGGAGrrGrrGGLLrrrrrrrrr\n"
      "suspending:rrGGGGArGrrGGLLrrrrrrrrr\n"
      "suspended:GrrrAAArrrrGrGGGGGGGGGGr\n"
      "rebooting:rrGGGGrrGWWGGLLrrrrrrrrr\n"
      "broken:GrrrGGrrrrrGrGGGGGGGGGGr\n"
      "compromised:rrrrAArrArrGrGGGGGGGGGGr\n";
  if (std::getenv("LIFECYCLE_PRINT")) std::cout << Grid();
  EXPECT_EQ(Grid(), expected);
}

// SECURITY: a paused (compromise-frozen) VM gets no new exec or attach session, and the
// refusal names why and the fix.
TEST(LifecycleTest, PausedRefusesExecAndAttachNamingWipe) {
  for (Action a : {Action::kExec, Action::kAttach, Action::kStart, Action::kReboot,
                   Action::kSuspend}) {
    auto d = Decide(State::kPaused, a, "ws", "placeholder of GH sent to evil.example");
    ASSERT_FALSE(d.ok()) << ActionName(a);
    EXPECT_EQ(d.error().code(), ErrorCode::kCompromised);
    EXPECT_NE(d.error().message().find("ws is paused: placeholder of GH sent to evil.example"),
              std::string::npos)
        << d.error().message();
    EXPECT_NE(d.error().hint().find("`cloister wipe ws`"), std::string::npos);
  }
  // The fix is legal from there: wipe (the CLI force-stops the frozen VM first), and stop.
  EXPECT_EQ(Lookup(State::kPaused, Action::kWipe).next, State::kStopped);
  EXPECT_EQ(Lookup(State::kPaused, Action::kStop).verdict, Verdict::kGo);
  EXPECT_EQ(Lookup(State::kRunning, Action::kCompromised).next, State::kPaused);
  EXPECT_EQ(Lookup(State::kBooting, Action::kCompromised).next, State::kPaused);
}

// SECURITY: a compromised workspace does not start, and names the wipe.
TEST(LifecycleTest, CompromisedWillNotStart) {
  auto d = Decide(State::kCompromised, Action::kStart, "ws", "token replayed");
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.error().code(), ErrorCode::kCompromised);
  EXPECT_EQ(d.error().message(), "workspace 'ws' is marked compromised (token replayed) and will "
                                 "not start");
  EXPECT_NE(d.error().hint().find("`cloister wipe ws`"), std::string::npos);
  EXPECT_EQ(Lookup(State::kCompromised, Action::kWipe).next, State::kStopped);
  EXPECT_EQ(Lookup(State::kCompromised, Action::kReset).next, State::kCompromised);
}

// SECURITY: no store verb touches the disks of a live VM.
TEST(LifecycleTest, DiskVerbsNeedNoLiveVm) {
  for (Action a : {Action::kReset, Action::kWipeHome, Action::kWipe, Action::kRemove,
                   Action::kCheckpoint, Action::kRestore, Action::kCheckpointRemove,
                   Action::kPrune}) {
    for (State s : {State::kBooting, State::kRunning, State::kStopping, State::kSuspending,
                    State::kRebooting}) {
      auto d = Decide(s, a, "ws");
      ASSERT_FALSE(d.ok()) << StateName(s) << " " << ActionName(a);
      EXPECT_EQ(d.error().message(), std::string("cannot ") + ActionVerb(a) + " workspace 'ws' "
                                     "while it is " + StateName(s));
      EXPECT_EQ(d.error().hint(), "stop it first: `cloister stop ws`");
    }
    EXPECT_TRUE(Decide(State::kStopped, a, "ws").ok()) << ActionName(a);
  }
}

TEST(LifecycleTest, BootingWaitsForReadyThenRuns) {
  EXPECT_EQ(Lookup(State::kBooting, Action::kExec).verdict, Verdict::kWaitReady);
  EXPECT_EQ(Lookup(State::kBooting, Action::kAttach).verdict, Verdict::kWaitReady);
  EXPECT_EQ(Lookup(State::kBooting, Action::kReady).next, State::kRunning);
  EXPECT_EQ(Lookup(State::kRunning, Action::kExec).verdict, Verdict::kGo);
  auto stopped = Decide(State::kStopped, Action::kExec, "dev");
  ASSERT_FALSE(stopped.ok());
  EXPECT_EQ(stopped.error().message(), "dev is not running");
  EXPECT_EQ(stopped.error().hint(), "`cloister start dev`");
}

TEST(LifecycleTest, DetailIsNeverExpanded) {
  auto d = Decide(State::kBroken, Action::kExec, "ws", "{name}{state}");
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.error().message(), "ws is not running: {name}{state}");
}

TEST(LifecycleTest, PidFileTier) {
  EXPECT_EQ(FromPidFile({}, false), State::kStopped);
  EXPECT_EQ(FromPidFile({}, true), State::kSuspended);
  EXPECT_EQ(FromPidFile({true, false, 42}, false), State::kBroken);
  EXPECT_EQ(FromPidFile({true, true, 42}, true), State::kRunning);
  EXPECT_EQ(WithCompromisedFlag(State::kStopped, true), State::kCompromised);
  EXPECT_EQ(WithCompromisedFlag(State::kSuspended, true), State::kCompromised);
  EXPECT_EQ(WithCompromisedFlag(State::kPaused, true), State::kPaused);
  EXPECT_EQ(WithCompromisedFlag(State::kStopped, false), State::kStopped);
  for (size_t s = 0; s < kStateCount; ++s) {
    State st = StateAt(s);
    bool live = st != State::kStopped && st != State::kSuspended && st != State::kBroken &&
                st != State::kCompromised;
    EXPECT_EQ(IsLive(st), live) << StateName(st);
  }
}

}  // namespace
}  // namespace cloister::lifecycle
