// Fuzzes the guest's READY timings parser: the READY text comes from the guest (hostile).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "supervisor/boot_timings.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  auto marks = cloister::vm::ParseGuestMarks(in);
  if (marks.ok()) (void)cloister::vm::GuestPhases(*marks, 1000);
  (void)cloister::vm::ParseTimingsLine(in);
  return 0;
}
