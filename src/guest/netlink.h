// One request to the kernel over netlink and its acks (rtnetlink routes, guest/transparent.cc;
// the nftables batch, guest/nft_batch.cc).
#pragma once

#include <cstddef>

#include "base/result.h"

namespace cloister::guest {

// Sends `len` bytes (one or more netlink messages) on a new socket of `protocol` (NETLINK_ROUTE,
// NETLINK_NETFILTER) and reads answers until `acks` messages were acked: OK then. The first
// refusal ends it with its errno (`ok_errno` counts as an ack: EEXIST for "already there"),
// named "WHAT: <errno text>" and, past the first message, which message it was. Bounded: 5 s
// without an answer is an error.
Status NetlinkExchange(int protocol, const char* what, const void* req, size_t len, size_t acks,
                       int ok_errno = 0);

}  // namespace cloister::guest
