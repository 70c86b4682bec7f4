// The workspace lifecycle (Firecracker's VmmAction model): the closed set of states a workspace
// can be in, the closed set of actions anyone can ask of it, and ONE data table
// (state, action) -> what happens. Every control request the supervisor answers (including exec
// and status) and every precondition a CLI verb or store verb checks is a Lookup/Decide here;
// nobody else compares states. A refusal carries the one error text and the hint that fixes it.
//
// Pure: depends on base only, no I/O. Who derives the current state:
//   - FromPidFile (below): the pid file alone (the store's cheap tier: a live supervisor reads
//     as kRunning until asked);
//   - vm::DeriveStatus (supervisor/state.h): FromPidFile, refined by the supervisor's status answer;
//   - the supervisor itself: its own state, changed only by the table's `next`.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "base/pid_file.h"
#include "base/result.h"

namespace cloister::lifecycle {

enum class State : uint8_t {
  kStopped,      // no VM, nothing saved
  kBooting,      // QEMU runs, the guest agent has not said READY yet
  kRunning,      // READY: exec/attach work
  kPaused,       // frozen by the compromise detector (QMP stop); only stop or wipe help
  kStopping,     // powering off (or QEMU gone and the supervisor exiting)
  kSuspending,   // saving RAM to suspend.state
  kSuspended,    // no VM, RAM saved: the next start resumes
  kRebooting,    // powering off to boot again at once
  kBroken,       // a dead or hung supervisor left its pid file
  kCompromised,  // stopped, and flagged compromised: will not boot until wiped
};
inline constexpr size_t kStateCount = 10;

enum class Action : uint8_t {
  // The VM's own life (supervisor queue; also `start`/`stop`/`suspend`/`reboot` from the CLI).
  kStart,       // `start`/`run`: boot or resume
  kReady,       // the guest agent said READY (event)
  kQemuExited,  // QEMU is gone (event)
  kChannelClosed,  // the channel to the guest agent closed (event; logged, changes nothing)
  kStop,        // `stop`, or SIGTERM/SIGINT/SIGHUP to the supervisor
  kForceStop,   // `stop --force`: kill QEMU now
  kSuspend,     // `stop --suspend`
  kReboot,      // `reboot`
  kCompromised,  // the proxy caught a placeholder out of scope (event): pause the guest
  // Requests that change nothing.
  kExec,        // `exec`, `run CMD`, `audit`: a stream to the guest agent
  kAttach,      // `attach`
  kStatus,      // `ls`, `describe`, the supervisor's `status`
  kSshConfirm,  // `ssh-confirm`: listen for signature confirmations
  // Settings: written now, read by the VM at its next start.
  kConfigChange,  // `config`, `egress`, `ssh-policy`
  kCredChange,    // `cred`, `ssh-keygen`
  // Store verbs on the disks: the VM must not be live.
  kReset,
  kWipeHome,
  kWipe,
  kRemove,
  kCheckpoint,        // offline `checkpoint create`
  kRestore,           // `checkpoint restore`
  kCheckpointRemove,  // `checkpoint rm`
  kPrune,             // `checkpoint prune`
  // A crash-consistent checkpoint of the RUNNING VM taken by its supervisor over QMP
  // (`checkpoint create` and `fork` of a running workspace).
  kLiveCheckpoint,
};
inline constexpr size_t kActionCount = 24;

enum class Verdict : uint8_t {
  kGo,         // legal: the workspace moves to `next` (which may be the state it is in)
  kAlready,    // nothing to do, and that is success (start on running, stop on stopped)
  kWaitReady,  // legal once the VM is running: wait for READY (exec/attach while booting)
  kDeferred,   // legal now; the live VM sees it at its next start (settings while running)
  kRefuse,     // illegal: `code`, `message`, `hint`
};

// One cell of the table. `message`/`hint` are templates: {name} (the workspace), {state} (the
// current state's name), {verb} (the action's verb phrase) and {detail} (what the caller knows:
// why it is broken, what paused it, the compromise reason).
struct Rule {
  Verdict verdict = Verdict::kRefuse;
  State next = State::kStopped;  // for kGo/kAlready/kDeferred; the current state otherwise
  ErrorCode code = ErrorCode::kFailedPrecondition;
  std::string_view message;
  std::string_view hint;
};

const char* StateName(State state);    // "stopped", "booting", ... (ls/describe/status JSON)
const char* ActionName(Action action); // "start", "exec", "wipe-home", ...
const char* ActionVerb(Action action); // the phrase in errors: "reset", "wipe the home of", ...
// The inverse of StateName, for the supervisor's status answer (guest-independent, but read
// from a socket: anything else is nullopt, never a guess).
std::optional<State> StateFromName(std::string_view name);

// The table. Every (state, action) pair has a cell (lifecycle_test checks all of them).
const Rule& Lookup(State state, Action action);

// The table's refusal as an Error: message and hint with the placeholders filled in.
Error Refusal(State state, Action action, std::string_view name, std::string_view detail = "");

// Lookup, with a refusal turned into its Error. On success, the cell (verdict and next state).
Result<Rule> Decide(State state, Action action, std::string_view name,
                    std::string_view detail = "");

// Decide for a precondition: OK unless the table refuses.
Status Check(State state, Action action, std::string_view name, std::string_view detail = "");

// True if a supervisor process is (or may be) live in this state: its lock is held.
bool IsLive(State state);

// The pid-file tier of the derivation (lima's rule, base/pid_file.h): no file -> stopped (or
// suspended when the RAM image exists); a file whose lock nobody holds -> broken; a held lock ->
// kRunning, meaning "a supervisor is live" until its status answer says which live state.
State FromPidFile(const PidFileState& pid_file, bool suspend_state_exists);

// A compromised flag turns a stopped (or suspended) workspace into kCompromised for the
// table; a live or broken one keeps its state (the flag already refuses the next boot).
State WithCompromisedFlag(State state, bool compromised);

}  // namespace cloister::lifecycle
