// Fuzzes the QMP line parser: QEMU runs guest code, so its replies are hostile input.
#include <cstddef>
#include <cstdint>
#include <string>

#include "vm/qmp.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string line(reinterpret_cast<const char*>(data), size);
  auto msg = cloister::vm::ParseQmpLine(line);
  if (msg.ok()) (void)msg->body.dump();
  return 0;
}
