// Fuzzes the host side of the exec sub-protocol: the decoder and parsers for guest messages,
// and the real RunExec client reading the input as the guest's side of an exec stream.
#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "channel/exec_client.h"
#include "channel/exec_proto.h"

using namespace cloister::channel;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view input(reinterpret_cast<const char*>(data), size);
  ExecDecoder d(/*from_guest=*/true);
  d.Feed(input);
  while (true) {
    auto m = d.Next();
    if (!m.ok() || !m->has_value()) break;
    if ((*m)->type == ExecMsg::kExit) (void)ParseExit((*m)->payload);
  }
  // The guest-side parsers too (the host is trusted there, but they must still be bounded).
  (void)ParseExecRequest(input);
  (void)ParseResize(input);
  (void)ParseSignal(input);

  if (size > 128 * 1024) return 0;
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) return 0;
  int null = open("/dev/null", O_WRONLY | O_CLOEXEC);
  size_t off = 0;
  fcntl(sv[1], F_SETFL, O_NONBLOCK);
  while (off < size) {
    ssize_t n = write(sv[1], data + off, size - off);
    if (n <= 0) break;
    off += static_cast<size_t>(n);
  }
  shutdown(sv[1], SHUT_WR);
  ExecRequest r;
  r.argv = {"true"};
  (void)RunExec(sv[0], r, ExecIo{-1, null, null});
  close(null);
  close(sv[0]);
  close(sv[1]);
  return 0;
}
