// Fuzzes the host's parser of the guest's audit report (hostile JSON).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "audit/report.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto report = cloister::audit::ParseAuditReport(
      std::string_view(reinterpret_cast<const char*>(data), size));
  if (!report.ok()) return 0;
  // Whatever parsed must render and re-encode without trouble, and round-trip.
  (void)cloister::audit::RenderReport(*report, cloister::audit::DiskHistory::kUsed);
  auto again = cloister::audit::ParseAuditReport(cloister::audit::ReportToJson(*report).dump());
  if (!again.ok()) std::abort();
  return 0;
}
