// Fuzzes the channel's hostile-input surface: the frame decoder, the payload parsers, and a real
// host-side Mux fed the bytes as if they came from the guest over the virtio-serial port.
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "channel/frame.h"
#include "channel/mux.h"

using namespace cloister::channel;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view input(reinterpret_cast<const char*>(data), size);

  // 1. Decoder and parsers, byte-split at an input-chosen point.
  FrameDecoder d;
  size_t split = size ? data[0] % (size + 1) : 0;
  d.Feed(input.substr(0, split));
  for (int round = 0; round < 2; ++round) {
    while (true) {
      auto f = d.Next();
      if (!f.ok() || !f->has_value()) break;
      const Frame& frame = **f;
      switch (frame.type) {
        case FrameType::kHello: (void)ParseHello(frame.payload); break;
        case FrameType::kOpen: (void)ParseOpen(frame.payload); break;
        case FrameType::kWindow: (void)ParseWindow(frame.payload); break;
        default: (void)SanitizeText(frame.payload); break;
      }
    }
    d.Feed(input.substr(split));
  }

  // 2. A host Mux reading the same bytes from a "guest" that then disconnects.
  if (size > 64 * 1024) return 0;
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) return 0;
  MuxOptions options;
  options.role = MuxRole::kHost;
  options.max_streams = 4;
  options.session = 1;  // the corpus answers HELLO with session 1
  auto mux = Mux::Create(sv[0], options);
  if (!mux.ok()) return 0;
  (*mux)->RegisterService("proxy", [](int fd, const std::vector<std::string>&) { close(fd); });
  if (!(*mux)->Start().ok()) return 0;
  size_t off = 0;
  while (off < size) {
    ssize_t n = send(sv[1], data + off, size - off, MSG_NOSIGNAL);
    if (n <= 0) break;  // the mux closed the channel (a violation): fine
    off += static_cast<size_t>(n);
  }
  shutdown(sv[1], SHUT_WR);
  char buf[4096];
  while (read(sv[1], buf, sizeof buf) > 0) {
  }
  (*mux)->Wait();
  close(sv[1]);
  return 0;
}
