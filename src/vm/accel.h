// Choosing QEMU's accelerator: KVM where it can run a stock kernel, else TCG (software emulation).
//
// `/dev/kvm` may be backed by PVM (a paravirtualised KVM that loads as the `kvm_pvm` module): a stock
// guest kernel crashes or hangs under it. `auto` detects that from sysfs and falls back to TCG with a
// one-line notice instead of waiting for a hang. The probe paths are injectable so the decision is
// unit-tested against a fake sysfs tree.
#pragma once

#include <string>

#include "base/result.h"

namespace cloister::vm {

enum class AccelMode { kAuto, kKvm, kTcg };
enum class Accel { kKvm, kTcg };

const char* AccelName(Accel accel);
// "auto", "kvm" or "tcg"; anything else is kInvalidArgument.
Result<AccelMode> ParseAccelMode(const std::string& text);

struct AccelProbe {
  std::string sysfs_root = "/sys";       // kvm_pvm shows as <sysfs_root>/module/kvm_pvm
  std::string kvm_device = "/dev/kvm";   // must open read-write for KVM to be usable
};

struct AccelChoice {
  Accel accel = Accel::kTcg;
  std::string notice;  // one line for stderr when auto fell back; empty otherwise
};

// kAuto: KVM if the device opens read-write and is not PVM-backed; else TCG with a notice.
// kKvm: KVM, or an error (with a hint to use --accel tcg) if it is missing or PVM-backed.
// kTcg: TCG.
Result<AccelChoice> ChooseAccel(AccelMode mode, const AccelProbe& probe = {});

}  // namespace cloister::vm
