// Thin adapter from the store (store/store.h, layout.h) to what the VM module needs, so the rest of
// src/vm does not spell store file names or walk its config.
#pragma once

#include <string>
#include <vector>

#include "base/result.h"
#include "store/store.h"
#include "vm/qemu_args.h"
#include "supervisor/state.h"

namespace cloister::vm {

RunPaths RunPathsFor(const Store& store, const std::string& name);

// The image's kernel and initramfs: beside the base image (images/<name>/vmlinuz, initrd.img).
struct KernelFiles {
  std::string kernel;
  std::string initrd;
};
Result<KernelFiles> KernelFilesFor(const WorkspaceConfig& config);

bool IsEphemeral(const WorkspaceConfig& config);

// Deletes every stopped ephemeral (`run --rm`) workspace whose VM is gone (supervisor killed,
// host crash). Called by the lifecycle verbs; errors are reported, not fatal.
std::vector<std::string> CollectDeadEphemeral(Store& store);

}  // namespace cloister::vm
