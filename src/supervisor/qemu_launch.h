// The spawn step of a boot (supervisor/boot_plan.h): everything of a BootPlan that touches the
// host. LaunchQemu finds the guest agent, builds the metadata disk (unless the plan keeps the
// resumed guest's), opens every fd the plan lists in its order, makes QEMU's QMP and channel
// listeners, builds the argv and starts QEMU under its own uid (qemu_access.h) with the minimal
// environment of supervisor/environment.h. Call it from the thread that owns QEMU:
// PR_SET_PDEATHSIG follows the thread that forked it.
#pragma once

#include <cstdint>

#include <sys/types.h>

#include <functional>
#include <string>

#include "base/result.h"
#include "supervisor/boot_plan.h"

namespace cloister::vm {

struct QemuLaunchOptions {
  std::string output_path;  // QEMU's stdout and stderr, appended (the supervisor's log)
  std::function<void(const std::string&)> progress;  // "starting QEMU (tcg, uid N)"
  std::function<void(const std::string&)> log;       // "qemu: ARGV"
  // The end of a boot phase (supervisor/boot_timings.h): "metadata-disk" once it is built (or
  // kept), "qemu-spawn" once QEMU is exec'd (fds, jail, fork).
  std::function<void(const std::string&)> phase;
  // The workspace's QEMU id from the store's registry (Store::QemuId, unique within the store);
  // the uid QEMU runs under as root is kQemuIdBase plus it (vm/qemu_access.h).
  uint32_t qemu_id = 0;
};

// Returns QEMU's pid (our child; the caller reaps it). Our copies of QEMU's fds are closed.
Result<pid_t> LaunchQemu(const BootPlan& plan, const QemuLaunchOptions& options);

}  // namespace cloister::vm
