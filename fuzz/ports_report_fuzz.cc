// Fuzz target: the host's parser of the guest's ports reports (supervisor/ports.h), and the spec
// parser of -p / `port add` on the same bytes.
// SECURITY: the report line comes from the guest agent (hostile to the host).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <set>
#include <string>
#include <string_view>

#include "supervisor/ports.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view bytes(reinterpret_cast<const char*>(data), size);
  auto ports = cloister::vm::ParsePortsReport(bytes);
  if (ports.ok()) {
    // Bounded, no port 0, no duplicates.
    if (ports->size() > cloister::vm::kMaxReportPorts) std::abort();
    std::set<uint16_t> seen(ports->begin(), ports->end());
    if (seen.size() != ports->size() || seen.count(0)) std::abort();
  }
  auto spec = cloister::vm::ParsePortSpec(bytes);
  if (spec.ok()) {
    // A parsed spec prints back to itself; no explicit address means loopback.
    auto again = cloister::vm::ParsePortSpec(spec->ToString());
    if (!again.ok() || !(*again == *spec) || spec->guest_port == 0) std::abort();
    if (bytes.find(':') == bytes.rfind(':') && !cloister::vm::IsLoopbackAddress(spec->host_ip)) {
      std::abort();
    }
  }
  return 0;
}
