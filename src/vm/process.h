// Starting and watching long-lived child processes (QEMU, the supervisor) without a shell.
// (base/subprocess.h runs a tool to completion; this starts one and returns its pid.)
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "base/result.h"

namespace cloister::vm {

struct SpawnOptions {
  std::string stdout_path;  // appended to; empty: /dev/null
  std::string stderr_path;  // appended to; empty: same as stdout
  bool die_with_parent = false;  // PR_SET_PDEATHSIG(SIGKILL): never outlives the caller thread
  bool new_session = false;      // setsid()
  std::optional<uid_t> uid;      // drop to this uid/gid before exec
  std::optional<gid_t> gid;
  std::vector<gid_t> groups;     // supplementary groups after the drop (default: none)
  std::vector<int> keep_fds;     // extra fds inherited at the same numbers (CLOEXEC cleared)
  // The child's whole environment ("NAME=value" each); nullopt: it inherits ours. The program
  // is still looked up on our PATH.
  std::optional<std::vector<std::string>> env;
  // Run in the child after the fds are in place and before the uid/gid drop and exec (e.g.
  // QemuJail::Enter, vm/qemu_jail.h). It must make raw system calls only (the parent may be
  // multithreaded). A non-zero return is written to stderr through `before_exec_error(ret)`, if
  // set, and the child exits 125 without exec.
  std::function<int()> before_exec;
  const char* (*before_exec_error)(int) = nullptr;
};

// Forks and execs argv[0] (PATH lookup). Returns the child's pid.
Result<pid_t> SpawnProcess(const std::vector<std::string>& argv, const SpawnOptions& options = {});

// Non-blocking check: the exit status if `pid` (our child) has exited, else nullopt.
// Exit status is the exit code, or 128+signal.
std::optional<int> TryReap(pid_t pid);

// Waits up to `timeout` for our child to exit; nullopt on timeout.
std::optional<int> WaitChild(pid_t pid, std::chrono::milliseconds timeout);

// True if a process with this pid exists (kill(pid, 0)).
bool ProcessAlive(pid_t pid);

}  // namespace cloister::vm
