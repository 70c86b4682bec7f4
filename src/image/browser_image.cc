// The browser image recipe (`cloister image build --browser`): Debian 12's chromium with the
// dependency closure apt computes for it, extracted with dpkg-deb like the test image (no package
// manager, no maintainer scripts, no systemd), busybox as init, the cloister boot hook, and the
// same small initramfs. The guest agent (guest/browser.h) starts Chromium headless from it.

#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <set>

#include "base/strings.h"
#include "base/subprocess.h"
#include "catalog/names.h"
#include "image/boot_hook.h"
#include "image/builder.h"
#include "image/busybox_root.h"
#include "image/debs.h"

namespace cloister::image {

namespace fs = std::filesystem;

namespace {

// The image's disk: the rootfs is about 520 MiB; the profile lives on tmpfs or on its own disk,
// so the headroom is for Chromium's caches outside the profile and /var.
constexpr uint64_t kBrowserDiskSize = 1024ull << 20;

// What apt resolves the closure from. chromium is the browser; libnss3-tools is certutil, with
// which the agent adds the proxy CA to the user's NSS database ($HOME/.pki/nssdb, the only store
// of added roots Debian 12's Chromium reads on Linux); ca-certificates gives the system bundle
// the agent appends the CA to (for tools other than Chromium); nftables is the agent's
// transparent egress; busybox-static is init, shell and coreutils.
const std::vector<std::string>& BrowserRoots() {
  static const std::vector<std::string> k{"chromium", "libnss3-tools", "ca-certificates",
                                          "nftables", "busybox-static"};
  return k;
}

// Packages of the closure left out: what only a package manager or an init system uses (no
// maintainer script runs in this image, busybox is init), a session bus nobody starts, and Mesa's
// GPU drivers with the LLVM they load (a VM has no GPU; headless Chromium renders in software
// with its own SwiftShader). Chromium's libraries (libdbus-1-3, libsystemd0, libgbm1) stay.
const std::set<std::string>& LeftOut() {
  static const std::set<std::string> k{
      "systemd", "systemd-sysv", "libsystemd-shared", "libpam-systemd", "dbus", "dbus-daemon",
      "dbus-bin", "dbus-user-session", "dbus-session-bus-common", "dbus-system-bus-common",
      "perl", "perl-base", "perl-modules-5.36", "libperl5.36", "libfile-find-rule-perl",
      "libnumber-compare-perl", "libtext-glob-perl", "usrmerge", "dpkg", "tar", "debconf",
      "init-system-helpers", "sysvinit-utils", "adduser", "passwd", "libgl1-mesa-dri",
      "libllvm15", "libz3-4", "libsensors5", "libsensors-config", "adwaita-icon-theme",
      "gtk-update-icon-cache"};
  return k;
}

std::vector<catalog::PostInstallStep> BrowserPostInstall() {
  std::vector<catalog::PostInstallStep> steps = BusyboxRootSteps();
  // Chromium's UI translations but en-US (the agent starts it with --lang=en-US).
  steps.push_back({"browser-prune",
                   "find \"$1/usr/lib/chromium/locales\" -name '*.pak' ! -name 'en-US.pak' "
                   "-delete\n"
                   "rm -rf \"$1/usr/share/icons\" \"$1/usr/share/applications\"\n"});
  // What update-ca-certificates would write (its maintainer script does not run here): the
  // Mozilla roots, in a fixed order, as the system bundle the agent appends the proxy CA to.
  steps.push_back({"ca-bundle",
                   "mkdir -p \"$1/etc/ssl/certs\"\n"
                   "find \"$1/usr/share/ca-certificates\" -name '*.crt' | LC_ALL=C sort | "
                   "while read -r f; do cat \"$f\"; done > "
                   "\"$1/etc/ssl/certs/ca-certificates.crt\"\n"
                   "chmod 0644 \"$1/etc/ssl/certs/ca-certificates.crt\"\n"});
  // Where the agent mounts the profile disk, and Debian's wrapper's defaults file it sources.
  steps.push_back({"browser-dirs",
                   "mkdir -p \"$1/var/lib/cloister-browser\" \"$1/etc/chromium.d\"\n"
                   "chmod 0755 \"$1/var/lib/cloister-browser\"\n"});
  steps.push_back(BootHookStep());
  return steps;
}

}  // namespace

Result<catalog::ImageEntry> BuildBrowserImage(const BuildOptions& o) {
  if (o.out_dir.empty() || o.cache_dir.empty()) {
    return Error(ErrorCode::kInvalidArgument,
                 "BuildBrowserImage: out_dir and cache_dir are required");
  }
  for (const char* tool : {"apt-get", "apt-cache", "dpkg-deb", "depmod", "mkfs.ext4", "cpio"}) {
    if (!ProgramExists(tool)) {
      return Error(ErrorCode::kUnavailable, std::string(tool) + " is not installed",
                   "run scripts/install-deps.sh run");
    }
  }
  ASSIGN_OR_RETURN(std::string work, FreshWorkDir(o.out_dir, o.work_dir));
  Stages stages(o.progress, 6);

  stages.Start("packages");
  ASSIGN_OR_RETURN(std::vector<std::string> closure, DependencyClosure(BrowserRoots()));
  std::vector<std::string> pkgs;
  for (const auto& p : closure) {
    if (!LeftOut().count(p)) pkgs.push_back(p);
  }
  ASSIGN_OR_RETURN(std::string kernel_pkg, StandardKernelPackage());
  pkgs.push_back(kernel_pkg);
  ASSIGN_OR_RETURN(std::vector<DebPackage> debs, FetchDebs(o.cache_dir, pkgs));
  uint64_t deb_bytes = 0;
  for (const auto& d : debs) deb_bytes += fs::file_size(d.path);
  stages.Done(std::to_string(debs.size()) + " packages (" +
              std::to_string(closure.size() + 1 - pkgs.size()) + " of the closure left out), " +
              FormatSize(deb_bytes));

  stages.Start("kernel");
  ASSIGN_OR_RETURN(KernelTree kernel, PrepareKernel(o.cache_dir, debs.back()));
  RETURN_IF_ERROR(CopyFile(kernel.vmlinuz, o.out_dir + "/" + catalog::names::kKernelFile));
  stages.Done(kernel_pkg + " " + debs.back().version);

  stages.Start("rootfs");
  std::string root = work + "/rootfs";
  RETURN_IF_ERROR(MakeDirs(root));
  for (size_t i = 0; i + 1 < debs.size(); ++i) RETURN_IF_ERROR(ExtractDeb(debs[i].path, root));
  std::vector<catalog::PostInstallStep> steps = BrowserPostInstall();
  RETURN_IF_ERROR(RunPostInstall(steps, root));
  struct stat st;
  if (lstat((root + "/usr/bin/chromium").c_str(), &st) != 0) {
    return Error(ErrorCode::kCorrupt, "the chromium package has no /usr/bin/chromium");
  }
  RETURN_IF_ERROR(NormalizeMtimes(root, kSourceDateEpoch));
  stages.Done(FormatSize(TreeBytes(root)) + ", " + std::to_string(steps.size()) +
              " post-install steps");

  return FinishBusyboxImage(root, kernel, work, o.out_dir, kBrowserImageName,
                            o.disk_size_bytes ? o.disk_size_bytes : kBrowserDiskSize,
                            std::string(kBrowserRecipeVersion) + "+linux-" + debs.back().version +
                                "+chromium-" + DebVersion(debs, "chromium") + "+busybox-" +
                                DebVersion(debs, "busybox-static"),
                            steps, stages);
}

}  // namespace cloister::image
