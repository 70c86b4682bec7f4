// The CLI side of the VM lifecycle: start (daemonise a supervisor and follow its progress), stop,
// suspend, reboot, status, and opening exec streams. Verbs in src/cli call these.
#pragma once

#include <chrono>
#include <ostream>
#include <string>

#include "base/result.h"
#include "lifecycle/lifecycle.h"
#include "store/store.h"
#include "vm/accel.h"
#include "supervisor/state.h"

namespace cloister::vm {

struct StartOptions {
  AccelMode accel = AccelMode::kAuto;
  std::chrono::seconds ready_timeout{600};
  bool sandbox = true;
  // Return as soon as the supervisor has QEMU running (its channel connected), without waiting
  // for the guest agent's READY (`start -d`, `run -d`). The boot then goes on in the background:
  // `ls`/`describe` show booting, then running (or the failure, with the boot log).
  bool detach = false;
  // Receives the supervisor's "timings NAME=MS ..." line (supervisor/boot_timings.h), if it sent
  // one before ready (`start --timings`).
  std::string* timings = nullptr;
};

// Starts NAME's VM and returns once the guest agent is ready (or the resumed VM runs), or with
// options.detach once QEMU runs. Prints boot stages on `progress` ("cloister: STAGE"). Already
// running (or booting, with detach): returns OK with a note.
// Refuses a compromised workspace (hint: `cloister wipe NAME`). On failure the error names the
// boot log.
Status StartWorkspace(Store& store, const std::string& name, const StartOptions& options,
                      std::ostream& progress);

struct StopOptions {
  bool force = false;
  bool suspend = false;
  std::chrono::milliseconds timeout{60000};
};
// Stops (or suspends) NAME's VM and waits until its supervisor is gone. Stopped: OK. Broken:
// cleans the stale run files (and with --force kills a hung supervisor).
Status StopWorkspace(Store& store, const std::string& name, const StopOptions& options,
                     std::ostream& progress);

Status RebootWorkspace(Store& store, const std::string& name, std::ostream& progress);

// A crash-consistent checkpoint of NAME's running VM, taken by its supervisor over QMP without
// stopping the guest (control op "checkpoint"): its id. Refused unless the VM is running.
Result<std::string> CheckpointRunningWorkspace(Store& store, const std::string& name);

VmStatus WorkspaceStatus(Store& store, const std::string& name);

// How long and for what exec/attach/start wait while the VM is booting (lifecycle kWaitReady).
struct ReadyWait {
  lifecycle::Action action = lifecycle::Action::kExec;  // kExec, kAttach or kStart
  std::chrono::seconds timeout{600};
  std::ostream* progress = nullptr;  // the boot stages as they change (a terminal), or nothing
};

// Waits (bounded) until the lifecycle table stops saying "wait for READY" for `wait.action`:
// OK once it may go, the table's refusal otherwise (paused, stopped, ...), kUnavailable with
// the boot log on timeout.
Status WaitUntilRunning(Store& store, const std::string& name, const ReadyWait& wait);

// A connected stream to the guest agent's exec service (the caller owns the fd). Goes through
// the lifecycle table: a booting workspace is waited for (WaitUntilRunning), a refusal is its
// error (a paused one names `cloister wipe NAME`).
Result<int> OpenExecStream(Store& store, const std::string& name,
                           const std::vector<std::string>& args = {},
                           const ReadyWait& wait = {});

// The same for any host-opened guest service the supervisor allows (protocol/contract.h:
// kExecService, kTcpService with args {PORT}, kSshdService). Others are refused by the supervisor.
Result<int> OpenGuestStream(Store& store, const std::string& name, const std::string& service,
                            const std::vector<std::string>& args = {}, const ReadyWait& wait = {});

// An exec/attach session whose stream ended early: if the VM was paused meanwhile (the
// compromise detector), the error says so and names the fix; otherwise `error` unchanged.
Error ExplainEndedSession(Store& store, const std::string& name, lifecycle::Action action,
                          const Error& error);

// The `cloister` executable to run as supervisor: $CLOISTER_EXE, /proc/self/exe if it is named
// cloister, else $CLOISTER_BINARY_DIR/src/cli/cloister (tests drive the CLI in-process).
Result<std::string> CloisterExecutable();

}  // namespace cloister::vm
