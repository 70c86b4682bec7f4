// cloister's boot parts on an image from an OCI source (issue 41 ask 3): the image's userland,
// cloister's kernel, initramfs, init, boot hook and busybox.
//
// Such an image has no init system and no kernel (Debian, Ubuntu, Alpine with musl, a rootfs of
// one static busybox). cloister brings what its boot needs, all static and under
// /usr/lib/cloister, never relying on the image's tools:
//   - busybox (Debian's busybox-static) and its applets as links in /usr/lib/cloister/bin, last on
//     the guest agent's PATH (guest/spawn.h), so `cp` (tar) and power-off work on any image;
//   - init (PID 1, a script of that busybox): mounts /proc /sys /dev /dev/pts /dev/shm /run /tmp,
//     starts the boot hook, reaps orphans, powers off on SIGUSR2/SIGTERM (busybox's poweroff);
//   - the boot hook (image/boot_hook.h, the same text as every image's), run by that busybox;
//   - the contract's user `dev` (uid/gid 1000, home /home/dev) added to the image's passwd and
//     group when absent (kept when it is there with uid 1000; refused with another uid).
// The initramfs is the test image's (modules for the disks, ext4 and the egress's netfilter) with
// switch_root to kInitPath. FinishStep's text runs inside the builder VM, in a chroot of the
// image's rootfs (so the image's own symlinks resolve inside it), and is recorded in the catalog.
#pragma once

#include <string>

#include "base/result.h"
#include "catalog/entry.h"
#include "image/build_util.h"

namespace cloister::image::oci {

inline constexpr char kPartsDir[] = "/usr/lib/cloister";
inline constexpr char kInitPath[] = "/usr/lib/cloister/init";
inline constexpr char kBusyboxPath[] = "/usr/lib/cloister/busybox";
// Where the builder puts cloister's busybox and the finishing script at the rootfs's top for
// FinishStep (the directory is gone when it ends). Busybox picks its applet by its own name, so
// the file is named busybox.
inline constexpr char kStagedDir[] = "/.cloister-parts";
inline constexpr char kStagedBusybox[] = "/.cloister-parts/busybox";
inline constexpr char kStagedFinish[] = "/.cloister-parts/finish.sh";

// PID 1 of an image from an OCI source.
std::string InitScript();

// The finishing, run as `/.cloister-parts/busybox sh -e /.cloister-parts/finish.sh` in a chroot of the
// rootfs. Its last line of output is "cloister-build: has tmux=0|1 sshd=0|1 sh=0|1".
catalog::PostInstallStep FinishStep();

struct BootParts {
  std::string busybox;          // host path of the static busybox to stage (kStagedBusybox)
  std::string kernel_version;   // the kernel package's version
  std::string busybox_version;  // busybox-static's version
};

// The host's part (trusted inputs only: Debian's packages): OUT_DIR/vmlinuz (Debian's standard
// kernel) and OUT_DIR/initrd.img (the busybox initramfs switching to kInitPath), and the static
// busybox extracted under WORK. Reproducible: same packages, same bytes.
Result<BootParts> PrepareBootParts(const std::string& cache_dir, const std::string& work,
                                   const std::string& out_dir);

}  // namespace cloister::image::oci
