#include "supervisor/kept_profile.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <future>
#include <mutex>
#include <thread>

#include "base/file_util.h"
#include "base/strings.h"
#include "channel/exec_client.h"
#include "protocol/contract.h"
#include "supervisor/devtools_close.h"

namespace cloister::vm {
namespace {

// Runs `script` as root in the browser VM; its output (bounded), or why it could not run.
Result<std::string> ExecInBrowserVm(const std::shared_ptr<channel::Mux>& mux,
                                    const std::string& script) {
  ASSIGN_OR_RETURN(int fd, mux->Open(protocol::kExecService, {}, std::chrono::seconds(10)));
  int out[2];
  if (pipe2(out, O_CLOEXEC) != 0) {
    close(fd);
    return ErrnoError("pipe", errno);
  }
  channel::ExecRequest req;
  req.argv = {"/bin/sh", "-c", script};
  req.user = "root";
  channel::ExecIo io;
  io.in = -1;
  io.out = out[1];
  io.err = out[1];
  auto r = channel::RunExec(fd, req, io);  // the scripts print a line: the pipe never fills
  close(out[1]);
  std::string said = Trim(DrainFdBounded(out[0], 4096));
  close(out[0]);
  close(fd);
  if (!r.ok()) return r.error();
  return said;
}

}  // namespace

// A kept profile lives in Chromium's memory and the guest's page cache until written back: before
// its QEMU is killed, Chromium is asked for its orderly shutdown over DevTools (Browser.close;
// supervisor/devtools_close.h), which commits its cookie store; then the browser VM waits for
// that Chromium to exit and syncs. SIGTERM is only the fallback: Chromium ends at once on it
// without committing (the kept cookie was lost in CI, "chromium ended in 0 s"). The wait is for the
// Chromium that ran (the oldest), since the agent restarts one. Bounded: a guest that does not
// answer is killed anyway (the profile then loses what it had not written, never more).
void FlushKeptProfile(const std::shared_ptr<channel::Mux>& mux,
                      const std::function<void(const std::string&)>& log,
                      std::chrono::seconds timeout) {
  auto done = std::make_shared<std::promise<void>>();
  std::future<void> finished = done->get_future();
  // The thread outlives this call when the guest is slow, and `log` may capture its caller (the
  // BrowserVm, which can be gone by then): the thread logs only through this gate, which the
  // caller closes before returning; a line in flight holds the gate's lock, so none is cut short.
  struct LogGate {
    std::mutex mu;
    std::function<void(const std::string&)> log;
  };
  auto gate = std::make_shared<LogGate>();
  gate->log = log;
  auto say = [gate](const std::string& line) {
    std::lock_guard<std::mutex> l(gate->mu);
    if (gate->log) gate->log(line);
  };
  std::thread([mux, done, say] {
    auto pid = ExecInBrowserVm(mux, "pgrep -o -x chromium || true");
    std::string p = pid.ok() ? *pid : "";
    if (p.empty() || p.find_first_not_of("0123456789") != std::string::npos) p = "";
    std::string how = "Browser.close";
    auto http_fd = mux->Open(protocol::kTcpService, {std::to_string(protocol::kBrowserCdpPort)},
                             std::chrono::seconds(10));
    auto ws_fd = mux->Open(protocol::kTcpService, {std::to_string(protocol::kBrowserCdpPort)},
                           std::chrono::seconds(10));
    Status closed = !http_fd.ok() ? Status(http_fd.error())
                    : !ws_fd.ok() ? Status(ws_fd.error())
                                  : CloseChromiumOverDevTools(*http_fd, *ws_fd);
    if (http_fd.ok() != ws_fd.ok()) close(http_fd.ok() ? *http_fd : *ws_fd);  // else taken over
    if (!closed.ok()) {
      say("flushing the kept profile: " + closed.error().message() + "; SIGTERM instead");
      how = "SIGTERM";
    }
    std::string script =
        p.empty() ? std::string("sync; echo no chromium was running")
                  : std::string(closed.ok() ? "" : "kill -TERM " + p + " 2>/dev/null; ") + "i=0; " +
                        "while [ $i -lt 80 ] && kill -0 " + p + " 2>/dev/null; do sleep 0.25; " +
                        "i=$((i+1)); done; sync; if kill -0 " + p + " 2>/dev/null; then " +
                        "echo chromium " + p + " still running after 20 s; else echo chromium " +
                        p + " ended in $((i / 4)) s after " + how + "; fi";
    auto r = ExecInBrowserVm(mux, script);
    say(r.ok() ? "flushed the kept profile: " + *r
               : "flushing the kept profile: " + r.error().message());
    done->set_value();
  }).detach();
  if (finished.wait_for(timeout) != std::future_status::ready) {
    log("flushing the kept profile: no answer in " + std::to_string(timeout.count()) +
        " s; killing the VM");
  }
  std::lock_guard<std::mutex> l(gate->mu);
  gate->log = nullptr;  // the thread, if still running, logs nothing more
}

}  // namespace cloister::vm
