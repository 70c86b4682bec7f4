// Tests only: a host and a guest channel::Mux joined by a socketpair, not yet started (register
// services first).
#pragma once

#include <sys/socket.h>

#include <memory>
#include <utility>

#include "channel/mux.h"

namespace cloister::vm::testing {

// Both null when the socketpair or a Mux could not be made.
inline std::pair<std::unique_ptr<channel::Mux>, std::unique_ptr<channel::Mux>> MuxPair() {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) return {};
  channel::MuxOptions h;
  h.role = channel::MuxRole::kHost;
  channel::MuxOptions g;
  g.role = channel::MuxRole::kGuest;
  auto host = channel::Mux::Create(sv[0], h);
  auto guest = channel::Mux::Create(sv[1], g);
  if (!host.ok() || !guest.ok()) return {};
  return {std::move(*host), std::move(*guest)};
}

}  // namespace cloister::vm::testing
