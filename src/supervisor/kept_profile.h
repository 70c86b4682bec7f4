// The flush of a browser VM's kept profile before its QEMU is killed (supervisor/browser_vm.h's
// teardown): Chromium's orderly shutdown over DevTools (supervisor/devtools_close.h), then a wait
// for that Chromium to exit and a sync in the guest, so what Chromium wrote reaches the encrypted
// profile disk instead of staying in the guest's page cache.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "channel/mux.h"

namespace cloister::vm {

// Flushes the kept profile of the browser VM behind `mux` (running, READY), logging its outcome
// through `log` (the supervisor log). Returns within `timeout` whatever the guest does: the VM is
// killed after it anyway, and the profile then loses only what Chromium had not written. `log` is
// never called after the return (the flush's thread, if the guest was slow, goes on silently until
// the caller's stopping the mux ends its last exec).
void FlushKeptProfile(const std::shared_ptr<channel::Mux>& mux,
                      const std::function<void(const std::string&)>& log,
                      std::chrono::seconds timeout = std::chrono::seconds(30));

}  // namespace cloister::vm
