// Transparent egress: the start of a guest stream on the "egress" channel service.
//
// The guest agent redirects every outbound TCP connection (nftables), looks up which name the
// synthetic destination address stands for, opens an "egress" stream and writes exactly one
// header line before the client's own bytes:
//   "<host> <port>\n"
// host: the name the guest resolved (lower-case [a-z0-9.-], 1..253 characters, labels 1..63) or a
// dotted IPv4 literal; port: decimal 1..65535 without leading zeros; the whole line (with its
// newline) at most kMaxTransparentHeader bytes. The host answers nothing before data; a refusal
// is a close of the stream. See proxy.h (ServeTransparent) for what follows the header.
//
// SECURITY: the header is guest bytes. ParseTransparentHeader is bounded and strict (one space,
// no CR, no trailing bytes, no IPv6, no empty labels); the fuzz target
// fuzz/transparent_header_fuzz.cc drives it.
#pragma once

#include <cstddef>
#include <string_view>

#include "base/result.h"
#include "proxy/http_head.h"

namespace cloister::proxy {

inline constexpr size_t kMaxTransparentHeader = 300;

// `line` is the header without its newline. Returns the authority (host as sent, which is
// already lower-case; a single trailing dot is dropped).
Result<Authority> ParseTransparentHeader(std::string_view line);

// True for a dotted-quad IPv4 literal (each part 0..255, no leading zeros).
bool IsIpv4Literal(std::string_view host);

}  // namespace cloister::proxy
