// Running a command in a workspace's guest over an exec stream, for verbs that move data through
// it (`cp`, `git pull`/`push`): stdout to an fd of the caller's, stderr kept bounded and
// terminal-safe.
#pragma once

#include <string>
#include <vector>

#include "base/result.h"
#include "channel/exec_client.h"
#include "store/store.h"

namespace cloister::cli {

struct GuestRun {
  channel::ExecExit exit;
  std::string out;  // stdout when no out_fd was given (bounded)
  std::string err;  // stderr, terminal-safe and bounded
};

// At most `limit` bytes of fd from its start.
std::string ReadBounded(int fd, size_t limit);

// A connected exec stream to NAME's guest agent (a booting workspace is waited for).
Result<int> OpenStream(Store& store, const std::string& name);

// Runs `argv` as dev on `stream` (closed here) with `in_fd`/`out_fd` as its stdin/stdout (-1:
// none / kept in GuestRun::out). Touches no path (ExtractTar may hold another cwd meanwhile).
// SECURITY: what the guest prints is kept bounded and made terminal-safe.
Result<GuestRun> RunOnStream(int stream, const std::vector<std::string>& argv, int in_fd,
                             int out_fd, channel::ExecControl* control);

// OpenStream + RunOnStream, an ended session explained (paused by the compromise detector).
Result<GuestRun> RunInGuest(Store& store, const std::string& name,
                            const std::vector<std::string>& argv, int in_fd, int out_fd);

// Reads fd to its end, discarding.
void Drain(int fd);

}  // namespace cloister::cli
