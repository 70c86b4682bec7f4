// Live state of a workspace's VM, derived on every call (lima's rule), never read from a stored
// flag: the pid file and its lock, the supervisor's answer on its socket, and the suspend state.
//
//   no run/supervisor.pid                  -> stopped (or suspended if suspend.state exists)
//   pid file, its lock not held            -> broken: the supervisor died (hint: stop --force)
//   (these two are lifecycle::FromPidFile, the tier the store shares)
//   lock held, socket answers              -> what the supervisor says (booting, running,
//                                             paused, ...; "stopped"/"suspended" from a live
//                                             supervisor means it is exiting: stopping)
//   lock held, socket does not answer      -> broken: hung supervisor (hint: stop --force)
//
// The supervisor holds an OFD write lock on its pid file for its whole life, so a pid reused by
// an unrelated process never looks alive.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>

#include <nlohmann/json.hpp>

#include "base/result.h"
#include "lifecycle/lifecycle.h"

namespace cloister::vm {

// Every run-time path of one workspace (from the store's WorkspacePaths; layout.h names them).
struct RunPaths {
  std::string name;
  std::string workspace_dir;
  std::string run_dir;
  std::string supervisor_pid;
  std::string supervisor_socket;
  std::string supervisor_log;
  std::string qmp_socket;
  std::string channel_socket;
  std::string meta_disk;
  std::string console_log;
  std::string suspend_state;
};

// The one lifecycle state (lifecycle/lifecycle.h); the vm names stay for the VM module's callers.
using VmState = lifecycle::State;
inline const char* VmStateName(VmState state) { return lifecycle::StateName(state); }

struct VmStatus {
  VmState state = VmState::kStopped;
  pid_t supervisor_pid = 0;
  std::string detail;  // e.g. the boot stage, why it is broken, or what paused it
  std::string hint;    // for broken and paused
  nlohmann::json info = nlohmann::json::object();  // the supervisor's status reply
};

VmStatus DeriveStatus(const RunPaths& paths,
                      std::chrono::milliseconds answer_timeout = std::chrono::seconds(5));

// Supervisor side: creates the pid file, takes its lock (kBusy if another supervisor holds it)
// and writes our pid. Returns the fd that holds the lock (keep it open for the process's life).
Result<int> ClaimPidFile(const std::string& path);

// The pid recorded in a pid file whose lock is held, or 0.
pid_t LivePid(const std::string& pid_path);

}  // namespace cloister::vm
