#include "vm/accel.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace cloister::vm {

const char* AccelName(Accel accel) { return accel == Accel::kKvm ? "kvm" : "tcg"; }

Result<AccelMode> ParseAccelMode(const std::string& text) {
  if (text == "auto") return AccelMode::kAuto;
  if (text == "kvm") return AccelMode::kKvm;
  if (text == "tcg") return AccelMode::kTcg;
  return Error(ErrorCode::kInvalidArgument, "unknown accelerator '" + text + "'",
               "use --accel auto, kvm or tcg");
}

namespace {

bool IsPvm(const AccelProbe& probe) {
  struct stat st;
  return stat((probe.sysfs_root + "/module/kvm_pvm").c_str(), &st) == 0;
}

// Empty when usable, else why not.
std::string KvmProblem(const AccelProbe& probe) {
  int fd = open(probe.kvm_device.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return probe.kvm_device + " is not usable (" + std::strerror(errno) + ")";
  close(fd);
  return "";
}

}  // namespace

Result<AccelChoice> ChooseAccel(AccelMode mode, const AccelProbe& probe) {
  if (mode == AccelMode::kTcg) return AccelChoice{Accel::kTcg, ""};
  bool pvm = IsPvm(probe);
  std::string problem = KvmProblem(probe);
  if (mode == AccelMode::kKvm) {
    if (!problem.empty()) {
      return Error(ErrorCode::kUnavailable, "KVM requested but " + problem,
                   "use --accel tcg (software emulation), or give this user access to /dev/kvm");
    }
    if (pvm) {
      return Error(ErrorCode::kUnavailable,
                   "KVM here is PVM-backed (kvm_pvm is loaded) and cannot boot a stock kernel",
                   "use --accel tcg or --accel auto");
    }
    return AccelChoice{Accel::kKvm, ""};
  }
  if (pvm) {
    return AccelChoice{Accel::kTcg,
                       "notice: KVM is PVM-backed here (kvm_pvm), which cannot boot a stock kernel; "
                       "using software emulation (TCG)"};
  }
  if (!problem.empty()) {
    return AccelChoice{Accel::kTcg, "notice: " + problem + "; using software emulation (TCG)"};
  }
  return AccelChoice{Accel::kKvm, ""};
}

}  // namespace cloister::vm
