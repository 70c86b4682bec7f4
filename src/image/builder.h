// Building cloister base images. Three recipes share one output shape (catalog::ImageEntry with a
// raw ext4 disk, a kernel and an initramfs) and one path into the signed catalog:
//   - the test image (`cloister image build --test`): busybox + tmux on Debian's standard kernel,
//     built in seconds from .deb files, for the VM tests;
//   - the full image (`cloister image build`): Debian 12 from mmdebstrap with systemd;
//   - the browser image (`cloister image build --browser`): Debian's chromium on the test
//     image's busybox base, for the browser VM (issue #18).
// Both are reproducible: same package versions in, same SHA-256 out.
#pragma once

#include <string>
#include <vector>

#include "base/result.h"
#include "catalog/catalog.h"
#include "catalog/entry.h"
#include "image/build_util.h"

namespace cloister::image {

inline constexpr char kTestImageName[] = "test";
// The browser VM's image (issue #18; `cloister image build --browser`).
inline constexpr char kBrowserImageName[] = "browser";
// The builder VM's image (issue 41; image/oci/): where images from OCI sources are built.
inline constexpr char kBuilderImageName[] = "builder";
// The default image (`create` without --image): catalog::kDefaultImageName.
inline constexpr const char* kFullImageName = catalog::kDefaultImageName;
// Bumped whenever a recipe changes what it puts in an image.
inline constexpr char kTestRecipeVersion[] = "9";  // 2: curl; 3: openssh-client, git, gh;
// 4: nodejs + npm, nftables and NAT modules, 448 MiB disk; 5: procps (codex runs `ps -o lstart=`);
// 6: virtio_balloon (free page reporting), the boot hook's "started" line, openssh-server and
// rsync (IDE access, guest/sshd.h), the sshd privilege separation user; 7: the boot hook and rcS
// check their mounts with the shell and grep (busybox has no mountpoint applet); 8: the boot hook
// makes its mount point only when it is not there, and starts the egress's modprobe in the
// background unless nf_tables is loaded (here the initramfs loaded it: no process); 9: apt, dpkg
// and python3-pip (the package managers' VM test), 576 MiB disk
inline constexpr char kFullRecipeVersion[] = "7";  // 2: nftables; 3: units masked
// (MaskedUnits), the boot hook's "started" line, openssh-server (its service masked, no host keys:
// sshd runs per channel stream), rsync, dev not locked for sshd; 4: unused hardware modules
// blacklisted (UnloadedModules), an initramfs of the root's drivers only (FullInitramfsModules);
// 5: the boot hook checks its mount with shell builtins (no mountpoint process); 6: systemd makes
// the metadata disk's mount point (the boot unit's RuntimeDirectory), the hook no mkdir process;
// the hook starts the transparent egress's modprobe in the background as it starts; 7: the CPU's
// kernel crypto drivers and cpufreq drivers blacklisted, the utmp runlevel unit masked

inline constexpr char kBrowserRecipeVersion[] = "3";  // 2: the boot hook's mount check (test 7);
// 3: its mount point made by systemd, the egress's modprobe started by the hook (full 6)
inline constexpr char kBuilderRecipeVersion[] = "1";

struct BuildOptions {
  std::string out_dir;    // receives disk.raw, vmlinuz, initrd.img (created if absent)
  std::string work_dir;   // scratch space, removed at the end (default: OUT_DIR/../.work-NAME)
  std::string cache_dir;  // Debian package cache (see debs.h)
  std::string npm_cache_dir;  // npm tarball cache (npm_tarball.h); empty: NpmCacheDir()
  ProgressSink progress;  // per-stage lines; may be empty
  uint64_t disk_size_bytes = 0;  // 0: the recipe's default
};

// The tiny test image. Boots under TCG to its init in seconds; the init runs the boot hook.
Result<catalog::ImageEntry> BuildTestImage(const BuildOptions& options);

// The browser image: Debian 12's chromium and its dependency closure (apt's, less what only a
// package manager, an init system or a GPU uses), certutil, nftables, busybox init and the boot
// hook, on the test image's initramfs. No root needed; about a minute from a warm package cache.
Result<catalog::ImageEntry> BuildBrowserImage(const BuildOptions& options);

// The builder image: Debian 12's skopeo, umoci and buildah with their dependency closure,
// e2fsprogs, nftables, busybox init and the boot hook, on the test image's initramfs. The VM an
// image build from an OCI source runs in (image/oci/build_plan.h). No root needed.
Result<catalog::ImageEntry> BuildBuilderImage(const BuildOptions& options);

// The full Debian 12 image (mmdebstrap, systemd, the standard kernel and Debian's initramfs,
// user dev with passwordless sudo, git curl ca-certificates openssh-client tmux python3 nodejs
// npm build-essential). Needs root. About 2-3 minutes.
Result<catalog::ImageEntry> BuildFullImage(const BuildOptions& options);
// The systemd units the full image masks (symlinks to /dev/null in /etc/systemd/system): gettys
// for a display and a serial line nobody types into, e2scrub for LVM the VM has none of.
const std::vector<std::string>& MaskedUnits();
// The modules the full image blacklists (/etc/modprobe.d/cloister-vm.conf): drivers for hardware
// of QEMU's q35 machine and CPU model that a workspace does not use, which udev would load.
const std::vector<std::string>& UnloadedModules();
// The modules the full image's initramfs carries (MODULES=list): an ext4 root on virtio-blk.
const std::vector<std::string>& FullInitramfsModules();

}  // namespace cloister::image
