#include "guest/forward.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

namespace cloister::guest {
namespace {

// Closes `fd` with a TCP reset (SO_LINGER 0); a unix socket is just closed.
void Reset(int fd) {
  linger l{1, 0};
  setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof l);
  close(fd);
}

}  // namespace

void ForwardConnection(channel::Mux* mux, const std::string& service, int conn,
                       const std::function<void(const std::string&)>& log) {
  if (!mux) {
    Reset(conn);  // no host connected
    return;
  }
  // The Mux owns `conn` from here, and closes it if the open fails: a second descriptor of the
  // same socket keeps it open until then, so that the failure is a reset.
  int keep = fcntl(conn, F_DUPFD_CLOEXEC, 0);
  mux->OpenAsync(service, {}, conn, [log, service, keep](Status st) {
    if (st.ok()) {
      if (keep >= 0) close(keep);
      return;
    }
    log("forward to host service " + service + ": " + st.error().message());
    if (keep >= 0) Reset(keep);
  });
}

}  // namespace cloister::guest
