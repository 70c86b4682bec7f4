#include "lifecycle/lifecycle.h"

#include <array>

namespace cloister::lifecycle {

namespace {

using S = State;
using E = ErrorCode;

constexpr Rule Go(State next) { return {Verdict::kGo, next, E::kInternal, {}, {}}; }
constexpr Rule Already(State s) { return {Verdict::kAlready, s, E::kInternal, {}, {}}; }
constexpr Rule Wait(State s) { return {Verdict::kWaitReady, s, E::kInternal, {}, {}}; }
constexpr Rule Later(State s) { return {Verdict::kDeferred, s, E::kInternal, {}, {}}; }
constexpr Rule No(ErrorCode code, std::string_view message, std::string_view hint) {
  return {Verdict::kRefuse, S::kStopped, code, message, hint};
}

// The refusals, one text each (a cell names one of these; {placeholders} as in lifecycle.h).
constexpr Rule kNotRunning = No(E::kFailedPrecondition, "{name} is not running",
                                "`cloister start {name}`");
constexpr Rule kSuspendedNotRunning =
    No(E::kFailedPrecondition, "{name} is suspended, not running",
       "`cloister start {name}` resumes it");
constexpr Rule kBrokenNotRunning =
    No(E::kFailedPrecondition, "{name} is not running: {detail}",
       "`cloister stop {name} --force` cleans up, then `cloister start {name}`");
constexpr Rule kCompromisedNotRunning =
    No(E::kCompromised, "{name} is not running: it is marked compromised ({detail})",
       "wipe its disk and home: `cloister wipe {name}` (settings, credentials and SSH keys are "
       "kept), then `cloister start {name}`");
constexpr Rule kGoingAway = No(E::kFailedPrecondition, "{name} is {state}, not running",
                               "`cloister start {name}` once it has stopped");
constexpr Rule kPaused =
    No(E::kCompromised, "{name} is paused: {detail}",
       "its VM was frozen when the egress proxy caught a credential placeholder leaving its "
       "scope; `cloister wipe {name}` stops it and wipes its disk and home (settings, "
       "credentials and SSH keys are kept)");
constexpr Rule kWillNotStart =
    No(E::kCompromised, "workspace '{name}' is marked compromised ({detail}) and will not start",
       "wipe its disk and home: `cloister wipe {name}` (settings, credentials and SSH keys are "
       "kept)");
constexpr Rule kBusy = No(E::kBusy, "{name} is {state}",
                          "wait for it, or `cloister stop {name} --force`");
constexpr Rule kNotLiveNow = No(E::kFailedPrecondition, "cannot {verb}: the workspace is {state}",
                                "wait until it is running");
constexpr Rule kRebootNotRunning = No(E::kFailedPrecondition, "{name} is {state}, not running",
                                      "`cloister start {name}`");
constexpr Rule kRebootLater =
    No(E::kFailedPrecondition, "cannot reboot: the workspace is {state}",
       "wait until it is running, or use `cloister stop {name}` then `cloister start {name}`");
constexpr Rule kNothingToSuspend =
    No(E::kFailedPrecondition, "{name} is not running; nothing to suspend",
       "`cloister start {name}`");
constexpr Rule kWhileLive =
    No(E::kFailedPrecondition, "cannot {verb} workspace '{name}' while it is {state}",
       "stop it first: `cloister stop {name}`");
constexpr Rule kWhilePaused =
    No(E::kFailedPrecondition, "cannot {verb} workspace '{name}' while it is paused",
       "`cloister wipe {name}` stops the frozen VM and wipes it; or `cloister stop {name} "
       "--force` first");
constexpr Rule kNoVm = No(E::kFailedPrecondition, "no VM to act on: the workspace is {state}",
                          "`cloister start {name}`");
constexpr Rule kNotBooting = No(E::kFailedPrecondition, "event ignored: the workspace is {state}",
                                "");

// clang-format off
// One row per state, one column per action, in the enums' order. The row's first comment names
// the state; each column's action is named on the right.
constexpr std::array<std::array<Rule, kActionCount>, kStateCount> kTable = {{
  // kStopped
  {Go(S::kBooting),          // start
   kNotBooting,              // ready
   kNotBooting,              // qemu exited
   kNotBooting,              // channel closed
   Already(S::kStopped),     // stop
   Already(S::kStopped),     // force stop
   kNothingToSuspend,        // suspend
   kRebootNotRunning,        // reboot
   kNoVm,                    // compromise
   kNotRunning,              // exec
   kNotRunning,              // attach
   Go(S::kStopped),          // status
   kNotRunning,              // ssh-confirm
   Go(S::kStopped),          // config change
   Go(S::kStopped),          // cred change
   Go(S::kStopped),          // reset
   Go(S::kStopped),          // wipe-home
   Go(S::kStopped),          // wipe
   Go(S::kStopped),          // rm
   Go(S::kStopped),          // checkpoint
   Go(S::kStopped),          // restore
   Go(S::kStopped),          // checkpoint rm
   Go(S::kStopped),          // prune
   kNotRunning},             // live checkpoint
  // kBooting
  {Wait(S::kBooting),        // start: (with -d: already booting)
   Go(S::kRunning),          // ready
   Go(S::kStopped),          // qemu exited: the boot failed
   Go(S::kBooting),          // channel closed
   Go(S::kStopping),         // stop: a booting guest may not handle ACPI: killed
   Go(S::kStopping),         // force stop
   kNotLiveNow,              // suspend
   kRebootLater,             // reboot
   Go(S::kPaused),           // compromise
   Wait(S::kBooting),        // exec
   Wait(S::kBooting),        // attach
   Go(S::kBooting),          // status
   Go(S::kBooting),          // ssh-confirm
   Later(S::kBooting),       // config change
   Later(S::kBooting),       // cred change
   kWhileLive, kWhileLive, kWhileLive, kWhileLive,   // reset, wipe-home, wipe, rm
   kWhileLive, kWhileLive, kWhileLive, kWhileLive,   // checkpoint, restore, checkpoint rm, prune
   kNotLiveNow},             // live checkpoint
  // kRunning
  {Already(S::kRunning),     // start
   kNotBooting,              // ready
   Go(S::kStopped),          // qemu exited
   Go(S::kRunning),          // channel closed
   Go(S::kStopping),         // stop: ACPI and the guest agent's poweroff
   Go(S::kStopping),         // force stop
   Go(S::kSuspending),       // suspend
   Go(S::kRebooting),        // reboot
   Go(S::kPaused),           // compromise
   Go(S::kRunning),          // exec
   Go(S::kRunning),          // attach
   Go(S::kRunning),          // status
   Go(S::kRunning),          // ssh-confirm
   Later(S::kRunning),       // config change
   Later(S::kRunning),       // cred change
   kWhileLive, kWhileLive, kWhileLive, kWhileLive,
   kWhileLive, kWhileLive, kWhileLive, kWhileLive,
   Go(S::kRunning)},         // live checkpoint
  // kPaused
  {kPaused,                  // start
   kNotBooting,              // ready: a frozen guest does not get to finish booting
   Go(S::kStopped),          // qemu exited
   Go(S::kPaused),           // channel closed
   Go(S::kStopping),         // stop: a frozen guest cannot power off: killed
   Go(S::kStopping),         // force stop
   kPaused,                  // suspend
   kPaused,                  // reboot
   Already(S::kPaused),      // compromise
   kPaused,                  // exec
   kPaused,                  // attach
   Go(S::kPaused),           // status
   Go(S::kPaused),           // ssh-confirm
   Later(S::kPaused),        // config change
   Later(S::kPaused),        // cred change
   kWhilePaused,             // reset
   kWhilePaused,             // wipe-home
   Go(S::kStopped),          // wipe: `cloister wipe` force-stops the frozen VM first
   kWhilePaused, kWhilePaused, kWhilePaused, kWhilePaused, kWhilePaused,
   kPaused},                 // live checkpoint
  // kStopping
  {kBusy,                    // start
   kNotBooting,              // ready
   Go(S::kStopped),          // qemu exited
   Go(S::kStopping),         // channel closed
   Already(S::kStopping),    // stop: already on its way
   Go(S::kStopping),         // force stop
   kNotLiveNow,              // suspend
   kRebootLater,             // reboot
   Go(S::kStopping),         // compromise: frozen on its way out (killed at the deadline)
   kGoingAway,               // exec
   kGoingAway,               // attach
   Go(S::kStopping),         // status
   Go(S::kStopping),         // ssh-confirm
   Later(S::kStopping),      // config change
   Later(S::kStopping),      // cred change
   kWhileLive, kWhileLive, kWhileLive, kWhileLive,
   kWhileLive, kWhileLive, kWhileLive, kWhileLive,
   kGoingAway},              // live checkpoint
  // kSuspending
  {kBusy,                    // start
   kNotBooting,              // ready
   Go(S::kSuspended),        // qemu exited: it quits once the RAM image is saved
   Go(S::kSuspending),       // channel closed
   Go(S::kStopping),         // stop
   Go(S::kStopping),         // force stop
   Already(S::kSuspending),  // suspend
   kRebootLater,             // reboot
   Go(S::kSuspending),       // compromise (the store flag refuses the resume)
   kGoingAway,               // exec
   kGoingAway,               // attach
   Go(S::kSuspending),       // status
   Go(S::kSuspending),       // ssh-confirm
   Later(S::kSuspending),    // config change
   Later(S::kSuspending),    // cred change
   kWhileLive, kWhileLive, kWhileLive, kWhileLive,
   kWhileLive, kWhileLive, kWhileLive, kWhileLive,
   kNotLiveNow},             // live checkpoint
  // kSuspended
  {Go(S::kBooting),          // start: resumes
   kNotBooting,              // ready
   kNotBooting,              // qemu exited
   kNotBooting,              // channel closed
   Already(S::kSuspended),   // stop
   Already(S::kSuspended),   // force stop
   Already(S::kSuspended),   // suspend
   kRebootNotRunning,        // reboot
   kNoVm,                    // compromise
   kSuspendedNotRunning,     // exec
   kSuspendedNotRunning,     // attach
   Go(S::kSuspended),        // status
   kSuspendedNotRunning,     // ssh-confirm
   Go(S::kSuspended),        // config change
   Go(S::kSuspended),        // cred change
   Go(S::kStopped),          // reset: drops the RAM image of the old disks
   Go(S::kStopped),          // wipe-home: drops it too
   Go(S::kStopped),          // wipe: drops it too
   Go(S::kStopped),          // rm
   Go(S::kSuspended),        // checkpoint
   Go(S::kStopped),          // restore: drops the RAM image
   Go(S::kSuspended),        // checkpoint rm
   Go(S::kSuspended),        // prune
   kSuspendedNotRunning},    // live checkpoint
  // kRebooting
  {kBusy,                    // start
   kNotBooting,              // ready (the new boot's READY comes in kBooting)
   Go(S::kBooting),          // qemu exited: boot again
   Go(S::kRebooting),        // channel closed
   Go(S::kStopping),         // stop
   Go(S::kStopping),         // force stop
   kNotLiveNow,              // suspend
   kRebootLater,             // reboot
   Go(S::kPaused),           // compromise
   Wait(S::kRebooting),      // exec
   Wait(S::kRebooting),      // attach
   Go(S::kRebooting),        // status
   Go(S::kRebooting),        // ssh-confirm
   Later(S::kRebooting),     // config change
   Later(S::kRebooting),     // cred change
   kWhileLive, kWhileLive, kWhileLive, kWhileLive,
   kWhileLive, kWhileLive, kWhileLive, kWhileLive,
   kNotLiveNow},             // live checkpoint
  // kBroken
  {Go(S::kBooting),          // start: cleans up after a dead supervisor first
   kNotBooting,              // ready
   kNotBooting,              // qemu exited
   kNotBooting,              // channel closed
   Go(S::kStopped),          // stop: cleans up (kills a hung supervisor with --force)
   Go(S::kStopped),          // force stop
   kBrokenNotRunning,        // suspend
   kBrokenNotRunning,        // reboot
   kNoVm,                    // compromise
   kBrokenNotRunning,        // exec
   kBrokenNotRunning,        // attach
   Go(S::kBroken),           // status
   kBrokenNotRunning,        // ssh-confirm
   Go(S::kBroken),           // config change
   Go(S::kBroken),           // cred change
   Go(S::kBroken),           // reset
   Go(S::kBroken),           // wipe-home
   Go(S::kBroken),           // wipe
   Go(S::kStopped),          // rm
   Go(S::kBroken),           // checkpoint
   Go(S::kBroken),           // restore
   Go(S::kBroken),           // checkpoint rm
   Go(S::kBroken),           // prune
   kBrokenNotRunning},       // live checkpoint
  // kCompromised
  {kWillNotStart,            // start
   kNotBooting,              // ready
   kNotBooting,              // qemu exited
   kNotBooting,              // channel closed
   Already(S::kCompromised), // stop
   Already(S::kCompromised), // force stop
   kNothingToSuspend,        // suspend
   kCompromisedNotRunning,   // reboot
   Already(S::kCompromised), // compromise
   kCompromisedNotRunning,   // exec
   kCompromisedNotRunning,   // attach
   Go(S::kCompromised),      // status
   kCompromisedNotRunning,   // ssh-confirm
   Go(S::kCompromised),      // config change
   Go(S::kCompromised),      // cred change
   Go(S::kCompromised),      // reset: the flag stays until a wipe
   Go(S::kCompromised),      // wipe-home: likewise
   Go(S::kStopped),          // wipe: clears the flag
   Go(S::kStopped),          // rm
   Go(S::kCompromised),      // checkpoint
   Go(S::kCompromised),      // restore
   Go(S::kCompromised),      // checkpoint rm
   Go(S::kCompromised),      // prune
   kCompromisedNotRunning},  // live checkpoint
}};
// clang-format on

constexpr std::array<const char*, kStateCount> kStateNames = {
    "stopped", "booting", "running", "paused", "stopping",
    "suspending", "suspended", "rebooting", "broken", "compromised"};

struct ActionText {
  const char* name;
  const char* verb;
};
constexpr std::array<ActionText, kActionCount> kActionTexts = {{
    {"start", "start"},
    {"ready", "finish booting"},
    {"qemu-exited", "stop"},
    {"channel-closed", "close the channel of"},
    {"stop", "stop"},
    {"force-stop", "stop"},
    {"suspend", "suspend"},
    {"reboot", "reboot"},
    {"compromised", "pause"},
    {"exec", "exec"},
    {"attach", "attach"},
    {"status", "show"},
    {"ssh-confirm", "confirm signatures for"},
    {"config", "change the settings of"},
    {"cred", "change the credentials of"},
    {"reset", "reset"},
    {"wipe-home", "wipe the home of"},
    {"wipe", "wipe"},
    {"rm", "delete"},
    {"checkpoint", "checkpoint (offline)"},
    {"restore", "restore a checkpoint of"},
    {"checkpoint-rm", "remove a checkpoint of"},
    {"prune", "prune checkpoints of"},
    {"live-checkpoint", "checkpoint (live)"},
}};

void ReplaceAll(std::string& s, std::string_view key, std::string_view value) {
  for (size_t at = s.find(key); at != std::string::npos; at = s.find(key, at + value.size())) {
    s.replace(at, key.size(), value);
  }
}

std::string Fill(std::string_view text, State state, Action action, std::string_view name,
                 std::string_view detail) {
  std::string s(text);
  // {detail} last: it is the only part that may hold arbitrary text (never re-expanded).
  ReplaceAll(s, "{name}", name);
  ReplaceAll(s, "{state}", StateName(state));
  ReplaceAll(s, "{verb}", ActionVerb(action));
  ReplaceAll(s, "{detail}", detail.empty() ? std::string_view("no details") : detail);
  return s;
}

}  // namespace

const char* StateName(State state) {
  size_t i = static_cast<size_t>(state);
  return i < kStateCount ? kStateNames[i] : "unknown";
}

const char* ActionName(Action action) {
  size_t i = static_cast<size_t>(action);
  return i < kActionCount ? kActionTexts[i].name : "unknown";
}

const char* ActionVerb(Action action) {
  size_t i = static_cast<size_t>(action);
  return i < kActionCount ? kActionTexts[i].verb : "act on";
}

std::optional<State> StateFromName(std::string_view name) {
  for (size_t i = 0; i < kStateCount; ++i) {
    if (name == kStateNames[i]) return static_cast<State>(i);
  }
  return std::nullopt;
}

const Rule& Lookup(State state, Action action) {
  size_t s = static_cast<size_t>(state), a = static_cast<size_t>(action);
  // Out-of-range values cannot come from the enums; fail closed on them anyway.
  static constexpr Rule kInvalid = No(E::kInternal, "no lifecycle rule for this request", "");
  if (s >= kStateCount || a >= kActionCount) return kInvalid;
  return kTable[s][a];
}

Error Refusal(State state, Action action, std::string_view name, std::string_view detail) {
  const Rule& r = Lookup(state, action);
  if (r.verdict != Verdict::kRefuse) {
    return Error(E::kInternal, std::string("lifecycle: ") + ActionName(action) + " while " +
                                   StateName(state) + " is not refused");
  }
  return Error(r.code, Fill(r.message, state, action, name, detail),
               Fill(r.hint, state, action, name, detail));
}

Result<Rule> Decide(State state, Action action, std::string_view name, std::string_view detail) {
  const Rule& r = Lookup(state, action);
  if (r.verdict == Verdict::kRefuse) return Refusal(state, action, name, detail);
  return r;
}

Status Check(State state, Action action, std::string_view name, std::string_view detail) {
  if (Lookup(state, action).verdict == Verdict::kRefuse) {
    return Refusal(state, action, name, detail);
  }
  return OkStatus();
}

bool IsLive(State state) {
  switch (state) {
    case S::kBooting:
    case S::kRunning:
    case S::kPaused:
    case S::kStopping:
    case S::kSuspending:
    case S::kRebooting:
      return true;
    case S::kStopped:
    case S::kSuspended:
    case S::kBroken:
    case S::kCompromised:
      return false;
  }
  return false;
}

State FromPidFile(const PidFileState& pid_file, bool suspend_state_exists) {
  if (!pid_file.exists) return suspend_state_exists ? S::kSuspended : S::kStopped;
  return pid_file.held ? S::kRunning : S::kBroken;
}

State WithCompromisedFlag(State state, bool compromised) {
  if (!compromised) return state;
  return state == S::kStopped || state == S::kSuspended ? S::kCompromised : state;
}

}  // namespace cloister::lifecycle
