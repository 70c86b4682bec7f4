// Fuzz target: the guest agent's /proc/net/tcp{,6} parser (guest/listeners.h), both families.
// SECURITY: any process in the guest shapes the socket table the agent reads for --auto-ports.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "guest/listeners.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view bytes(reinterpret_cast<const char*>(data), size);
  for (bool ipv6 : {false, true}) {
    auto ports = cloister::guest::ParseProcNetTcp(bytes, ipv6);
    if (!ports.ok()) continue;
    // Port 0 is never reported; the report line of any result is bounded.
    if (ports->count(0)) std::abort();
    if (cloister::guest::FormatPortsReport(*ports).size() > 2048) std::abort();
  }
  return 0;
}
