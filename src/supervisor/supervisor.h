// The workspace supervisor: one process per running workspace (like lima's hostagent).
//
// `cloister start` daemonises `cloister _supervise NAME`, which runs RunSupervisor. It
//   - claims run/supervisor.pid (an OFD lock held for its whole life) and serves run/supervisor.sock
//     (control.h protocol: status, stop, suspend, reboot, open-stream);
//   - holds the workspace lock for the VM's lifetime (mutating verbs see the workspace busy);
//   - builds the per-boot metadata disk, starts QEMU (PR_SET_PDEATHSIG: QEMU never outlives it),
//     connects QMP and the host-guest channel, and waits for the guest agent's READY;
//   - then takes the proven-boot checkpoint (live, through the store's Prepare/CommitCheckpoint
//     and QMP blockdev-add + blockdev-snapshot);
//   - serves host services to the guest (named channel services; later the egress proxy and the
//     SSH agent);
//   - when QEMU exits: cleans the run directory, releases the lock, and for an ephemeral
//     (`run --rm`) workspace deletes it.
//
// All VM lifecycle work happens on the main thread through one action queue and one transition
// table (Firecracker's VmmAction shape); an action that is illegal in the current state is an error
// naming the state. QEMU is started from the main thread because PR_SET_PDEATHSIG follows the
// thread that forked it.
//
// Progress: if progress_fd >= 0, the supervisor writes lines "stage TEXT", "launched QEMU_PID" once
// QEMU runs with its channel connected (`start -d` returns there), then "ready INFO" or
// "error MESSAGE<TAB>HINT", and closes it. The reader may close its end at any time.
#pragma once

#include <chrono>
#include <functional>
#include <string>

#include "base/result.h"
#include "vm/accel.h"

namespace cloister::vm {

// Top-level config.json key marking a `run --rm` workspace (kept verbatim by the store).
inline constexpr char kEphemeralKey[] = "ephemeral";

struct SupervisorOptions {
  std::string store_root;
  std::string name;
  Accel accel = Accel::kTcg;
  int progress_fd = -1;
  std::chrono::seconds ready_timeout{600};
  std::chrono::seconds stop_timeout{60};  // graceful powerdown on SIGTERM
  bool sandbox = true;
  // An image SPEC (a catalog name) to the absolute path of its verified raw disk, with the CLI's
  // checks (cli/image_resolver.h; installed by `cloister _supervise`): the browser VM's automatic
  // start resolves the default browser image with it. Null: no automatic start.
  std::function<Result<std::string>(const std::string& spec)> resolve_image;
};

// Runs until the VM stops. Returns the process exit code (0 after a clean stop).
int RunSupervisor(const SupervisorOptions& options);

}  // namespace cloister::vm
