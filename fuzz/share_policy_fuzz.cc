// Fuzzes vm/share_policy.h: the rule the share guard applies to a name read from QEMU's memory
// (the guest's choice of bytes). The first byte picks the directory's context; the rest is the name.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "vm/share_policy.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  cloister::vm::NewNameContext where;
  where.in_git_dir = data[0] & 1;
  where.git_dir_top = where.in_git_dir && (data[0] & 2);
  where.holds_head = data[0] & 4;
  std::string_view name(reinterpret_cast<const char*>(data + 1), size - 1);
  int verdict = cloister::vm::CheckNewNameWith(name, where);
  bool one = cloister::vm::IsOneComponent(name);
  // A name that is no single component, or any case of .git, is never allowed.
  if ((!one || cloister::vm::EqualsFold(name, ".git")) && verdict == 0) __builtin_trap();
  (void)cloister::vm::CheckNewName(name, where, [&] { return where.holds_head; });
  return 0;
}
