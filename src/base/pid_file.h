// Pid files whose liveness is proven by a lock, never by kill(pid, 0): the owner holds an OFD write
// lock on the file for its whole life (the workspace supervisor's run/supervisor.pid), so a pid
// that the kernel recycled for an unrelated process never looks alive, and a crashed owner's file
// shows as stale at once (the kernel drops the lock with the process).
//
// Shared by the store (Store::State, RequireStopped) and the VM module (vm/state.h), so both derive
// "is the supervisor alive" the same way.
#pragma once

#include <sys/types.h>

#include <string>

#include "base/result.h"

namespace cloister {

struct PidFileState {
  bool exists = false;  // the file exists
  bool held = false;    // some process holds its lock: the owner is alive
  pid_t pid = 0;        // the pid written in it (0 if unreadable or malformed)
};

// Reads a pid file and whether its lock is held (F_OFD_GETLK; takes no lock itself).
PidFileState ReadPidFile(const std::string& path);

// Owner side: creates the file (0600), takes its OFD write lock without waiting (kBusy if another
// process holds it) and writes our pid. Returns the fd holding the lock: keep it open for life.
Result<int> ClaimPidFile(const std::string& path);

}  // namespace cloister
