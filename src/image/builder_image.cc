// The builder image recipe (`cloister image build --builder`, built on first use by an image build
// from an OCI source): the VM in which cloister builds images from OCI sources (image/oci/). Debian
// 12's skopeo, umoci and buildah with the dependency closure apt computes for them, e2fsprogs for
// the output disk, nftables for the agent's transparent egress, busybox as init and shell, the boot
// hook, and the test image's initramfs, like the browser image (no package manager, no systemd).

#include <sys/stat.h>

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

// The image's disk: the rootfs is about 250 MiB. An image build grows it (the builder's system
// disk is an overlay with a larger virtual size, and the builder grows its filesystem to it).
constexpr uint64_t kBuilderDiskSize = 768ull << 20;

// skopeo (copies an image between transports: a registry, archives, layouts, buildah's store),
// umoci (unpacks an OCI layout into a rootfs), buildah (builds a Dockerfile, RUN under chroot
// isolation, vfs storage), e2fsprogs (mkfs.ext4 -d of the output disk, resize2fs of its own root),
// nftables (the agent's transparent egress), ca-certificates (the bundle the agent appends the
// proxy's CA to) and busybox-static (init, shell, coreutils).
const std::vector<std::string>& BuilderRoots() {
  static const std::vector<std::string> k{"skopeo",   "umoci",           "buildah",
                                          "e2fsprogs", "nftables",       "ca-certificates",
                                          "busybox-static"};
  return k;
}

// Packages of the closure left out: what only a package manager, an init system or a signing
// workflow uses (no maintainer script runs here; busybox is init; images are not verified with
// GnuPG in the builder: the built disk is what cloister signs).
const std::set<std::string>& BuilderLeftOut() {
  static const std::set<std::string> k{
      "perl", "perl-base", "perl-modules-5.36", "libperl5.36", "libfile-find-rule-perl",
      "libnumber-compare-perl", "libtext-glob-perl", "usrmerge", "dpkg", "debconf",
      "init-system-helpers", "sysvinit-utils", "adduser", "passwd", "dirmngr", "gnupg",
      "gnupg-l10n", "gnupg-utils", "gpg-agent", "gpg-wks-client", "gpg-wks-server", "gpgsm",
      "pinentry-curses", "readline-common", "libgdbm6", "libgdbm-compat4", "lsb-base"};
  return k;
}

std::vector<catalog::PostInstallStep> BuilderPostInstall() {
  std::vector<catalog::PostInstallStep> steps = BusyboxRootSteps();
  // What update-ca-certificates would write (as the browser image).
  steps.push_back({"ca-bundle",
                   "mkdir -p \"$1/etc/ssl/certs\"\n"
                   "find \"$1/usr/share/ca-certificates\" -name '*.crt' | LC_ALL=C sort | "
                   "while read -r f; do cat \"$f\"; done > "
                   "\"$1/etc/ssl/certs/ca-certificates.crt\"\n"
                   "chmod 0644 \"$1/etc/ssl/certs/ca-certificates.crt\"\n"});
  // The containers tools' settings: vfs storage (no overlay module, no fuse), short names
  // resolved on docker.io only (as `docker pull` does), and no network namespace for a RUN
  // (chroot isolation shares the builder's network, whose only way out is the proxy).
  steps.push_back({"containers-config",
                   "mkdir -p \"$1/etc/containers\" \"$1/var/lib/containers/storage\" "
                   "\"$1/var/tmp\"\n"
                   "chmod 1777 \"$1/var/tmp\"\n"
                   "cat > \"$1/etc/containers/storage.conf\" <<'EOF'\n"
                   "[storage]\n"
                   "driver = \"vfs\"\n"
                   "runroot = \"/run/containers/storage\"\n"
                   "graphroot = \"/var/lib/containers/storage\"\n"
                   "EOF\n"
                   "cat > \"$1/etc/containers/registries.conf\" <<'EOF'\n"
                   "unqualified-search-registries = [\"docker.io\"]\n"
                   "short-name-mode = \"permissive\"\n"
                   "EOF\n"
                   "cat > \"$1/etc/containers/containers.conf\" <<'EOF'\n"
                   "[containers]\n"
                   "netns = \"host\"\n"
                   "[engine]\n"
                   "cgroup_manager = \"cgroupfs\"\n"
                   "events_logger = \"none\"\n"
                   "EOF\n"});
  steps.push_back(BootHookStep());
  return steps;
}

}  // namespace

Result<catalog::ImageEntry> BuildBuilderImage(const BuildOptions& o) {
  if (o.out_dir.empty() || o.cache_dir.empty()) {
    return Error(ErrorCode::kInvalidArgument,
                 "BuildBuilderImage: out_dir and cache_dir are required");
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
  ASSIGN_OR_RETURN(std::vector<std::string> closure, DependencyClosure(BuilderRoots()));
  std::vector<std::string> pkgs;
  for (const auto& p : closure) {
    if (!BuilderLeftOut().count(p)) pkgs.push_back(p);
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
  std::vector<catalog::PostInstallStep> steps = BuilderPostInstall();
  RETURN_IF_ERROR(RunPostInstall(steps, root));
  for (const char* tool : {"/usr/bin/skopeo", "/usr/bin/umoci", "/usr/bin/buildah",
                           "/sbin/mkfs.ext4"}) {
    struct stat st;
    if (lstat((root + tool).c_str(), &st) != 0) {
      return Error(ErrorCode::kCorrupt, std::string("the builder's packages have no ") + tool);
    }
  }
  RETURN_IF_ERROR(NormalizeMtimes(root, kSourceDateEpoch));
  stages.Done(FormatSize(TreeBytes(root)) + ", " + std::to_string(steps.size()) +
              " post-install steps");

  return FinishBusyboxImage(root, kernel, work, o.out_dir, kBuilderImageName,
                            o.disk_size_bytes ? o.disk_size_bytes : kBuilderDiskSize,
                            std::string(kBuilderRecipeVersion) + "+linux-" + debs.back().version +
                                "+skopeo-" + DebVersion(debs, "skopeo") + "+umoci-" +
                                DebVersion(debs, "umoci") + "+buildah-" +
                                DebVersion(debs, "buildah"),
                            steps, stages);
}

}  // namespace cloister::image
