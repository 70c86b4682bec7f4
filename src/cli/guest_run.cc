#include "cli/guest_run.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>

#include "base/terminal_text.h"
#include "protocol/contract.h"
#include "supervisor/launcher.h"

namespace cloister::cli {

std::string ReadBounded(int fd, size_t limit) {
  std::string out;
  lseek(fd, 0, SEEK_SET);
  char buf[4096];
  ssize_t n;
  while (out.size() < limit && (n = read(fd, buf, sizeof buf)) > 0) out.append(buf, n);
  if (out.size() > limit) out.resize(limit);
  return out;
}


// A connected exec stream to NAME's guest agent (a booting workspace is waited for).
Result<int> OpenStream(Store& store, const std::string& name) {
  vm::ReadyWait wait;
  wait.action = lifecycle::Action::kExec;
  return vm::OpenExecStream(store, name, {}, wait);
}

// Runs `argv` as dev on `stream` (closed here) with `in_fd`/`out_fd` as its stdin/stdout (-1:
// none / kept in GuestRun::out). Touches no path (ExtractTar may hold another cwd meanwhile).
// SECURITY: what the guest prints is kept bounded and made terminal-safe.
Result<GuestRun> RunOnStream(int stream, const std::vector<std::string>& argv, int in_fd,
                             int out_fd, channel::ExecControl* control) {
  int err_fd = memfd_create("cp-stderr", MFD_CLOEXEC);
  int cap_fd = out_fd < 0 ? memfd_create("cp-stdout", MFD_CLOEXEC) : -1;
  if (err_fd < 0 || (out_fd < 0 && cap_fd < 0)) {
    int e = errno;
    close(stream);
    if (err_fd >= 0) close(err_fd);
    return ErrnoError("memfd_create", e);
  }
  channel::ExecRequest req;
  req.argv = argv;
  req.user = protocol::kGuestUser;
  channel::ExecIo io;
  io.in = in_fd;
  io.out = out_fd < 0 ? cap_fd : out_fd;
  io.err = err_fd;
  auto exit = channel::RunExec(stream, req, io, control);
  close(stream);
  GuestRun run;
  run.err = TerminalSafe(ReadBounded(err_fd, 2048), true);
  while (!run.err.empty() && run.err.back() == '\n') run.err.pop_back();
  close(err_fd);
  if (cap_fd >= 0) {
    run.out = ReadBounded(cap_fd, 4096);
    close(cap_fd);
  }
  if (!exit.ok()) return exit.error();
  run.exit = *exit;
  return run;
}

// OpenStream + RunOnStream, an ended session explained (paused by the compromise detector).
Result<GuestRun> RunInGuest(Store& store, const std::string& name,
                            const std::vector<std::string>& argv, int in_fd, int out_fd) {
  ASSIGN_OR_RETURN(int stream, OpenStream(store, name));
  auto run = RunOnStream(stream, argv, in_fd, out_fd, nullptr);
  if (!run.ok()) return vm::ExplainEndedSession(store, name, lifecycle::Action::kExec, run.error());
  return run;
}

void Drain(int fd) {
  char buf[65536];
  while (true) {
    ssize_t n = read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
  }
}

}  // namespace cloister::cli
