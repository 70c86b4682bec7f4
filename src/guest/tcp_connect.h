// The guest side of the host-opened `tcp` channel service (protocol::kTcpService): the host
// (a published port, the browser's DevTools socket) opens a stream with args {PORT}; the agent
// connects to the guest's own 127.0.0.1:PORT, else [::1]:PORT, and copies bytes both ways until
// each side has half-closed.
//
// SECURITY: the peer here is the host, the destination is the guest itself: only loopback
// addresses are ever dialled, whatever the args say; a malformed PORT refuses the stream.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/result.h"

namespace cloister::guest {

// "1".."65535", digits only; anything else (empty, sign, leading zero, too long) is an error.
Result<uint16_t> ParseTcpServiceArgs(const std::vector<std::string>& args);

// Connects to 127.0.0.1:port, else [::1]:port (blocking, bounded). The caller owns the fd.
Result<int> ConnectGuestLoopback(uint16_t port);

// Copies a->b and b->a until both directions reached EOF (shutdown(SHUT_WR) on the other side at
// each EOF) or either side errs. Closes neither fd.
void RelayBoth(int a, int b);

// The service handler: parses args, connects, relays, closes `stream` (and the connection).
void ServeTcpConnect(int stream, const std::vector<std::string>& args);

}  // namespace cloister::guest
