// Fuzz target: the transparent-mode header line (proxy/transparent.h) and the egress policy's rule
// parser and matcher over the same bytes.
// SECURITY: the header is the first thing the guest agent sends on an "egress" stream.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "proxy/policy.h"
#include "proxy/transparent.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view bytes(reinterpret_cast<const char*>(data), size);
  // As the proxy does: the header is what comes before the first newline, bounded.
  std::string_view line = bytes.substr(0, cloister::proxy::kMaxTransparentHeader);
  size_t nl = line.find('\n');
  if (nl != std::string_view::npos) line = line.substr(0, nl);
  auto a = cloister::proxy::ParseTransparentHeader(line);
  (void)cloister::proxy::IsIpv4Literal(bytes.substr(0, 64));
  auto rule = cloister::proxy::ParseEgressRule(line);
  if (a.ok() && rule.ok()) {
    cloister::proxy::EgressPolicy p;
    p.allow_all = false;
    p.allow.push_back(*rule);
    (void)p.Allows(a->host, a->port);
    (void)p.AllowsOpaque(a->host, a->port);
  }
  return 0;
}
