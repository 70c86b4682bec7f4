#include "ui/peer_uid.h"

#include <cstdio>
#include <sstream>

#include "base/file_util.h"

namespace cloister::ui {
namespace {

// "0100007F:1F90": 127.0.0.1 (in the kernel's byte order, as printed) and a port.
std::string Loopback(uint16_t port) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0100007F:%04X", port);
  return buf;
}

}  // namespace

Result<uid_t> PeerUidFromTable(std::string_view table, uint16_t peer_port, uint16_t server_port) {
  const std::string local = Loopback(peer_port), remote = Loopback(server_port);
  std::istringstream in{std::string(table)};
  std::string line;
  std::getline(in, line);  // the header
  while (std::getline(in, line)) {
    std::istringstream row(line);
    std::string slot, l, r, state, queues, timer, retr, uid;
    if (!(row >> slot >> l >> r >> state >> queues >> timer >> retr >> uid)) continue;
    if (l != local || r != remote) continue;
    char* end = nullptr;
    unsigned long v = std::strtoul(uid.c_str(), &end, 10);
    if (uid.empty() || *end != '\0') break;
    return static_cast<uid_t>(v);
  }
  return Error(ErrorCode::kNotFound, "no TCP socket 127.0.0.1:" + std::to_string(peer_port) +
                                         " -> 127.0.0.1:" + std::to_string(server_port));
}

Result<uid_t> LoopbackPeerUid(uint16_t peer_port, uint16_t server_port) {
  // The table is small on a desktop; bounded anyway (a row is ~150 bytes).
  ASSIGN_OR_RETURN(std::string table, ReadFileBounded("/proc/net/tcp", 16 << 20));
  return PeerUidFromTable(table, peer_port, server_port);
}

}  // namespace cloister::ui
