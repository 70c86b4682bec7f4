// Fuzz target: the guest agent's DNS (guest/dns.h): query parsing and the answer built from it.
// SECURITY: the agent answers any process in the guest (and containers in it) on port 53.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "guest/dns.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view bytes(reinterpret_cast<const char*>(data), size);
  (void)cloister::guest::ParseDnsQuery(bytes);
  static cloister::guest::SyntheticMap map(64);  // small: eviction is exercised too
  std::string reply = cloister::guest::AnswerDnsQuery(bytes, map, "ws");
  // The answer always fits a classic UDP datagram and never invents a response to a runt.
  if (reply.size() > 512) std::abort();
  if (size < 12 && !reply.empty()) std::abort();
  return 0;
}
