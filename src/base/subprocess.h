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
};

struct RunOutput {
  int exit_code = -1;    // -1 if killed by a signal
  int term_signal = 0;   // signal number if killed
  bool timed_out = false;
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

}  // namespace cloister
