// The pieces the busybox-rooted recipes (the test image, test_image.cc, and the browser image,
// browser_image.cc) share: their root filesystem is Debian's .deb files extracted with dpkg-deb
// (no package manager, no maintainer scripts), busybox as init and shell, and a small initramfs
// of our own that loads the modules the rootfs lacks and switch_roots to it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/result.h"
#include "catalog/entry.h"
#include "image/build_util.h"
#include "image/debs.h"

namespace cloister::image {

// The modules the initramfs loads (the rootfs has no module tree).
const std::vector<std::string>& InitramfsModules();

// Post-install steps "prune", "busybox-links", "users" (root and the contract's guest user) and
// "init" (busybox inittab running the boot hook, rcS mounting /proc /sys /dev/pts /dev/shm /run
// /tmp). The recipe appends BootHookStep() after its own steps.
std::vector<catalog::PostInstallStep> BusyboxRootSteps();

// The initramfs's /init loading `module_paths` (relative to lib/modules/) in order, then
// switch_root to the root's `init` (images from OCI sources: cloister's, image/oci/finish.h).
std::string InitramfsInit(const std::vector<std::string>& module_paths,
                          const std::string& init = "/sbin/init");

// Builds the initramfs (busybox from `rootfs`, InitramfsModules() with their dependencies from
// `kernel`, InitramfsInit) in WORK/initramfs and writes it as a reproducible cpio to `initrd`.
// `modules` (may be null) receives how many modules it loads.
Status MakeBusyboxInitramfs(const std::string& rootfs, const KernelTree& kernel,
                            const std::string& work, const std::string& initrd, size_t* modules,
                            const std::string& init = "/sbin/init");

// The last three stages every busybox-rooted recipe shares, in this order: "initramfs"
// (MakeBusyboxInitramfs into OUT_DIR/initrd.img), "disk" (MakeImageDisk of `disk_size_bytes`
// under the image `name`) and "hash" (FinishEntry with `version` and `steps`, which removes
// `work`). `stages` must have just closed the recipe's rootfs stage; `root` is the finished
// rootfs (mtimes normalised).
Result<catalog::ImageEntry> FinishBusyboxImage(const std::string& root, const KernelTree& kernel,
                                               const std::string& work, const std::string& out_dir,
                                               const std::string& name, uint64_t disk_size_bytes,
                                               const std::string& version,
                                               const std::vector<catalog::PostInstallStep>& steps,
                                               Stages& stages);

// The version of package `name` in `debs` ("" if absent).
std::string DebVersion(const std::vector<DebPackage>& debs, const std::string& name);

}  // namespace cloister::image
