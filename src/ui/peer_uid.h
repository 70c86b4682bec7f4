// Who is on the other end of a loopback TCP connection: the uid that owns the peer's socket, from
// the kernel's table of TCP sockets (/proc/net/tcp and tcp6: local address, remote address, uid).
// The dashboard serves its own user only (server.h): any other local user's connection is closed
// at accept, so a user holding connections open cannot starve it.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <string_view>

#include "base/result.h"

namespace cloister::ui {

// The uid owning the socket whose local end is `peer_port` on 127.0.0.1 and whose remote end is
// 127.0.0.1:`server_port`, as `table` (the text of /proc/net/tcp) lists it. kNotFound when no row
// matches (the peer is gone, or lives in another network namespace).
Result<uid_t> PeerUidFromTable(std::string_view table, uint16_t peer_port, uint16_t server_port);

// The same from the running kernel's table. Fail closed: an unreadable table is an error.
Result<uid_t> LoopbackPeerUid(uint16_t peer_port, uint16_t server_port);

}  // namespace cloister::ui
