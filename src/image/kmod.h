// Kernel module load order for the initramfs, computed on the host from modules.dep.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"

namespace cloister::image {

// Given the text of a modules.dep file (lines "path/a.ko: path/dep1.ko path/dep2.ko", each listing
// the full dependency closure, nearest dependency first) and module names ("virtio_blk",
// "virtio-rng": '-' and '_' are equivalent, as for modprobe), returns the module paths to insmod
// in order: every dependency before the module needing it, each path once.
// A wanted module absent from modules.dep is kNotFound (it may be built in: check first with
// IsBuiltin). Malformed lines are kCorrupt.
Result<std::vector<std::string>> ModuleLoadOrder(std::string_view modules_dep,
                                                 const std::vector<std::string>& wanted);

// True if `name` is listed in a modules.builtin text (lines "kernel/.../name.ko").
bool IsBuiltin(std::string_view modules_builtin, const std::string& name);

// "kernel/drivers/virtio/virtio-rng.ko.xz" -> "virtio_rng".
std::string ModuleNameFromPath(std::string_view path);

}  // namespace cloister::image
