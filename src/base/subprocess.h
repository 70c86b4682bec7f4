// Running external tools (qemu-img, mkfs.ext4, mmdebstrap...) without a shell.
//
// Arguments are passed as a vector straight to execvp: nothing is ever interpreted by /bin/sh,
// so a workspace name or path can never inject a command.
#pragma once

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "base/result.h"

namespace cloister {

struct RunOptions {
  std::string stdin_data;                      // written to the child's stdin, then closed
  bool capture_stdout = true;                  // else inherited from the caller
  bool capture_stderr = true;                  // else inherited from the caller
  std::map<std::string, std::string> env_set;  // added to (or replacing in) the caller's environment
  std::vector<std::string> env_unset;
  std::string cwd;                             // empty: the caller's
  std::optional<std::chrono::milliseconds> timeout;  // SIGKILL after this long
  bool clear_env = false;  // the child's environment is env_set only, nothing of the caller's
  size_t max_output = 0;   // SIGKILL once stdout and stderr together exceed it (0: no limit)
};

struct RunOutput {
  int exit_code = -1;    // -1 if killed by a signal
  int term_signal = 0;   // signal number if killed
  bool timed_out = false;
  bool output_truncated = false;  // killed for exceeding max_output
  std::string out;
  std::string err;

  bool success() const { return exit_code == 0; }
};

// Runs argv[0] (looked up in PATH) with argv. Fails only if the program could not be started
// (kNotFound when it is not installed) or an OS call failed; a non-zero exit is in RunOutput.
Result<RunOutput> RunProcess(const std::vector<std::string>& argv, const RunOptions& options = {});

// Like Run, but a non-zero exit becomes an Error naming the program and the last line of its
// stderr.
Result<RunOutput> RunProcessChecked(const std::vector<std::string>& argv, const RunOptions& options = {});

// True if `program` is found in PATH.
bool ProgramExists(const std::string& program);

// For a child between fork() and exec (async-signal-safe): marks every descriptor from `lowest`
// up close-on-exec, so the program starts with 0-2 and only the descriptors the caller clears the
// flag on afterwards. Every fork-and-exec of cloister calls it (posix_spawn callers add
// posix_spawn_file_actions_addclosefrom_np instead).
// SECURITY: a library's descriptor opened without O_CLOEXEC (Boost.Asio opens its sockets and
// accepts without it) must never reach a child: QEMU, which a hostile guest may compromise, would
// hold the proxy's listener and its connections; a guest user's shell the agent's channel.
// close_range(CLOSE_RANGE_CLOEXEC) (Linux 5.11), else one fcntl per descriptor below
// RLIMIT_NOFILE (at most 2^20).
void CloexecFrom(int lowest);

}  // namespace cloister
