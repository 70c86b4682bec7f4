// Thin adapter from the store (store/store.h, layout.h) to what the VM module needs, so the rest of
// src/vm does not spell store file names or walk its config.
#pragma once

#include <optional>
#include <string>
#include <string_view>
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

// How QEMU enters the kernel: through PVH with the uncompressed vmlinux (vm/pvh_kernel.h; the
// default, several seconds faster under TCG), or the bzImage through SeaBIOS's loader.
enum class KernelBoot { kPvh, kBzImage };
const char* KernelBootName(KernelBoot boot);
// "pvh" / "bzimage" (anything else: nullopt).
std::optional<KernelBoot> ParseKernelBoot(std::string_view text);

// The kernel to boot for `want`: with kPvh, the vmlinux derived from `k.kernel` and cached under
// `<store_root>/cache/pvh/`, if that kernel allows it; else the bzImage. *used says which was
// chosen and *note why PVH was not (empty when it was, or not wanted).
KernelFiles ChooseBootKernel(const KernelFiles& k, const std::string& store_root, KernelBoot want,
                             KernelBoot* used, std::string* note);

bool IsEphemeral(const WorkspaceConfig& config);

// Deletes every stopped ephemeral (`run --rm`) workspace whose VM is gone (supervisor killed,
// host crash). Called by the lifecycle verbs; errors are reported, not fatal.
std::vector<std::string> CollectDeadEphemeral(Store& store);

}  // namespace cloister::vm
