// Fuzzes the bzImage setup-header walk, the xz payload decode and the ELF note walk of
// vm/pvh_kernel.h (a kernel file is an image artifact, parsed with bounds all the same).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "vm/pvh_kernel.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  (void)cloister::vm::HasPvhEntry(in);
  auto elf = cloister::vm::ExtractPvhKernel(in);
  if (elf.ok()) (void)cloister::vm::HasPvhEntry(*elf);
  return 0;
}
