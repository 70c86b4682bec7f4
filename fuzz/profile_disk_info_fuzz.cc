// Fuzz target: the check of `qemu-img info --output=json` of the browser profile disk
// (browser/profile_disk.h). SECURITY: the qcow2 header it describes is writable by the browser
// VM's QEMU, hostile once compromised; an accepted input is always an encrypted qcow2.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "browser/profile_disk.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view bytes(reinterpret_cast<const char*>(data), size);
  auto r = cloister::browser::ParseProfileDiskInfo(bytes);
  if (r.ok() && bytes.find("luks") == std::string_view::npos) std::abort();
  return 0;
}
