// The transparent egress's nftables rules as one nfnetlink batch the agent sends itself, instead of
// an `nft -f` process: under TCG that process (its start and its ruleset parser) was 0.33-0.42 s
// of guest time on the default image, on the path READY waits on (docs/design.md, "Boot phases").
//
// The batch holds the same rules as RedirectRuleset's text (guest/transparent.h), as the kernel
// stores them: `nft list table ip cloister` prints the same after either (guest_transparent_test
// checks that in a network namespace). If the batch cannot be loaded, the agent falls back to the
// nft process (guest/transparent.cc).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "base/result.h"

namespace cloister::guest {

// The batch's bytes: BATCH_BEGIN; table ip cloister added, deleted and added again (a reload
// replaces it whole); the nat chains output and prerouting; with `with_filter`, the filter chain
// filter_output; BATCH_END. Messages are numbered from `seq`; every one between the two markers
// asks for the kernel's ACK, and `*acks` (if given) gets how many that is.
std::string RedirectRulesBatch(uint16_t port, uint16_t dns_port, bool with_filter, uint32_t seq,
                               size_t* acks = nullptr);

// Sends RedirectRulesBatch on a NETLINK_NETFILTER socket (guest/netlink.h): OK only when the
// kernel acked every message (it commits a batch whole or not at all); an error names the first
// message it refused and why.
Status LoadRedirectRules(uint16_t port, uint16_t dns_port, bool with_filter);

}  // namespace cloister::guest
