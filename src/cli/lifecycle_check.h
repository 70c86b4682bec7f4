// The CLI's preconditions from the lifecycle table (lifecycle/lifecycle.h): verbs ask these
// instead of comparing states themselves.
#pragma once

#include <string>

#include "lifecycle/lifecycle.h"
#include "store/store.h"

namespace cloister::cli {

// For a settings verb (kConfigChange, kCredChange): true if the table says the change applies at
// the VM's next start (a supervisor is live; it read the settings when it booted). From the
// pid-file tier, so it needs no answer from a supervisor that may hang.
bool AppliesAtNextStart(Store& store, const std::string& name, lifecycle::Action action);

}  // namespace cloister::cli
