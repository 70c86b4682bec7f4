// The test image recipe: Debian's .deb files extracted into a directory (no package manager),
// post-install steps for busybox, users, init and the boot hook, a small initramfs of our own.

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include <filesystem>

#include "base/strings.h"
#include "base/subprocess.h"
#include "catalog/names.h"
#include "catalog/sha256.h"
#include "image/boot_hook.h"
#include "image/builder.h"
#include "image/busybox_root.h"
#include "image/debs.h"
#include "image/kmod.h"
#include "image/npm_tarball.h"
#include "protocol/contract.h"

namespace cloister::image {

namespace fs = std::filesystem;

namespace {

// Room for the rootfs (about 370 MiB with Node, Python and apt) and small test files. Tests that install an agent
// CLI (hundreds of MiB) grow a copy (image::testing::SharedTestImageWithDisk).
constexpr uint64_t kTestDiskSize = 576ull << 20;

// Everything in the test rootfs: busybox, tmux and the libraries tmux needs, C.UTF-8 (tmux wants
// a UTF-8 locale), terminfo; and Debian's real curl with its library closure (apt-cache depends
// --recurse, Debian 12), so the wire-boundary tests run a real TLS client inside the guest; OpenSSH's
// clients, git (without perl) and gh for the SSH agent and HTTPS proofs.
const std::vector<std::string>& TestPackages() {
  static const std::vector<std::string> k{
      "busybox-static", "libc6", "libc-bin", "libgcc-s1", "libtinfo6", "libevent-core-2.1-7",
      "libutempter0", "ncurses-base", "tmux",
      // curl
      "curl", "libcurl4", "libbrotli1", "libcom-err2", "libdb5.3", "libffi8", "libgmp10",
      "libgnutls30", "libgssapi-krb5-2", "libhogweed6", "libidn2-0", "libk5crypto3",
      "libkeyutils1", "libkrb5-3", "libkrb5support0", "libldap-2.5-0", "libnettle8",
      "libnghttp2-14", "libp11-kit0", "libpsl5", "librtmp1", "libsasl2-2",
      "libsasl2-modules-db", "libssh2-1", "libssl3", "libtasn1-6", "libunistring2", "libzstd1",
      "zlib1g",
      // OpenSSH's clients (ssh, ssh-add, ssh-keygen) for the sign-only agent's in-guest proof
      "openssh-client", "libedit2", "libbsd0", "libmd0", "libfido2-1", "libcbor0.8", "libudev1",
      "libselinux1", "libpcre2-8-0",
      // git (its C commands and git-remote-https; perl is left out) and gh, for HTTPS through
      // the proxy
      "git", "libcurl3-gnutls", "libexpat1", "gh",
      // Debian's Node.js (18; Debian unbundles acorn, cjs-module-lexer and undici, its fetch) for
      // npm (npm 10 itself comes from the npm tarball cache) and the transparent-egress proofs
      "nodejs", "libnode108", "libicu72", "libuv1", "libc-ares2", "libstdc++6", "gcc-12-base",
      "node-acorn", "node-xtend", "node-cjs-module-lexer", "node-undici", "node-busboy",
      // nftables, with which the guest agent redirects outbound TCP to itself
      "nftables", "libnftables1", "libnftnl11", "libjansson4", "libxtables12", "libmnl0",
      // procps's ps (the full image has it too): codex starts its app server and checks it with
      // `ps -p PID -o stat=,lstart=`, which busybox's ps does not take
      "procps", "libproc2-0", "libsystemd0", "libcap2", "libgcrypt20", "libgpg-error0",
      "liblzma5", "liblz4-1", "libncursesw6",
      // OpenSSH's server for IDE access (guest/sshd.h: `sshd -i` per channel stream; no service,
      // no host keys in the image) and rsync for `rsync -e ssh` through it
      "openssh-server", "libcrypt1", "libwrap0", "libaudit1", "libpam0g", "libcap-ng0", "libnsl2",
      "libtirpc3", "rsync", "libacl1", "libpopt0", "libxxhash0",
      // apt and dpkg (apt-get update and install from a local repository through the proxy) and
      // Debian's python3-pip (pip download from a local index): the package managers of the
      // real-clients VM test (supervisor/clients_vm_test.cc). Their closure beyond the above
      // (apt-get -s --no-install-recommends against an empty status, Debian 12), less what only
      // maintainer scripts use (adduser, passwd, PAM modules, debconf).
      "apt", "libapt-pkg6.0", "libseccomp2", "gpgv", "libbz2-1.0", "dpkg", "tar",
      "libpython3.11-minimal", "python3.11-minimal", "python3-minimal", "media-types",
      "libtirpc-common", "readline-common", "libreadline8", "libsqlite3-0", "libuuid1",
      "libpython3.11-stdlib", "python3.11", "libpython3-stdlib", "python3", "ca-certificates",
      "python3-lib2to3", "python3-distutils", "python3-pkg-resources", "python3-setuptools",
      "python3-wheel", "python3-pip"};
  return k;
}

}  // namespace

// Modules the initramfs loads (with their dependencies): disks, console, net, rng, ext4, 9p, and
// what nftables needs for the guest agent's NAT redirect and rejects (the rootfs has no module
// tree, so nothing can be loaded on demand later), the dummy device for the egress route, and the
// balloon whose free page reporting gives freed guest RAM back to the host.
const std::vector<std::string>& InitramfsModules() {
  static const std::vector<std::string> k{
      "virtio_pci",   "virtio_blk", "virtio_console",  "virtio_net",     "virtio_rng",
      "crc32c_generic", "ext4",     "9pnet_virtio",    "9p",             "nf_tables",
      "nft_chain_nat", "nft_redir", "nft_reject_inet", "nft_reject_ipv4", "nft_ct",
      "dummy",        "virtio_balloon"};
  return k;
}

namespace {

std::vector<catalog::PostInstallStep> TestPostInstall() {
  std::vector<catalog::PostInstallStep> steps;
  // npm (unpacked from its verified tarball before these steps) on PATH, as `npm install -g` would.
  steps.push_back({"npm-links",
                   "mkdir -p \"$1/usr/local/bin\"\n"
                   "ln -sf ../lib/node_modules/npm/bin/npm-cli.js \"$1/usr/local/bin/npm\"\n"
                   "ln -sf ../lib/node_modules/npm/bin/npx-cli.js \"$1/usr/local/bin/npx\"\n"
                   "chmod 0755 \"$1/usr/local/lib/node_modules/npm/bin/npm-cli.js\" "
                   "\"$1/usr/local/lib/node_modules/npm/bin/npx-cli.js\"\n"});
  for (auto& s : BusyboxRootSteps()) steps.push_back(std::move(s));
  // apt and dpkg's state, as their maintainer scripts (not run here) would leave it: an empty
  // package database (the extracted packages are not in it, so a package with dependencies would
  // want them again: the tests install one without), apt's download directories owned by its
  // sandbox user, and python's stdlib importable as python3.
  steps.push_back({"package-managers",
                   "mkdir -p \"$1/var/lib/dpkg/info\" \"$1/var/lib/dpkg/updates\" "
                   "\"$1/var/lib/dpkg/triggers\" \"$1/var/lib/apt/lists/partial\" "
                   "\"$1/var/cache/apt/archives/partial\" \"$1/var/log/apt\" "
                   "\"$1/etc/apt/sources.list.d\" \"$1/etc/apt/apt.conf.d\"\n"
                   ": > \"$1/var/lib/dpkg/status\"\n"
                   ": > \"$1/var/lib/dpkg/available\"\n"
                   "echo '_apt:x:42:65534::/nonexistent:/bin/false' >> \"$1/etc/passwd\"\n"
                   "for d in lib/apt/lists cache/apt/archives; do\n"
                   "  chown 42:0 \"$1/var/$d/partial\"\n"
                   "  chmod 0700 \"$1/var/$d/partial\"\n"
                   "done\n"});
  steps.push_back(BootHookStep());
  return steps;
}

}  // namespace

std::vector<catalog::PostInstallStep> BusyboxRootSteps() {
  std::vector<catalog::PostInstallStep> steps;
  steps.push_back({"prune",
                   "rm -rf \"$1/usr/share/doc\" \"$1/usr/share/man\" \"$1/usr/share/info\" "
                   "\"$1/usr/share/lintian\" \"$1/usr/share/locale\" \"$1/usr/share/bug\" "
                   "\"$1/usr/lib/x86_64-linux-gnu/gconv\"\n"});
  steps.push_back({"busybox-links",
                   "for p in $(\"$1/bin/busybox\" --list-full); do\n"
                   "  [ -e \"$1/$p\" ] || [ -L \"$1/$p\" ] && continue\n"
                   "  mkdir -p \"$1/$(dirname \"$p\")\"\n"
                   "  ln -s /bin/busybox \"$1/$p\"\n"
                   "done\n"});
  // The guest user of the host-guest contract (protocol/contract.h).
  const std::string user = protocol::kGuestUser, home = protocol::kGuestHome;
  const std::string uid = std::to_string(protocol::kGuestUid);
  const std::string gid = std::to_string(protocol::kGuestGid);
  steps.push_back({"users",
                   "mkdir -p \"$1/etc\" \"$1/root\" \"$1" + home + "\"\n"
                   "printf 'root:x:0:0:root:/root:/bin/sh\\n" + user + ":x:" + uid + ":" + gid + ":" +
                       user + ":" + home + ":/bin/sh\\n"
                       // sshd's privilege separation user (Debian's openssh-server makes it)
                       "sshd:x:100:65534::/run/sshd:/bin/false\\n'"
                       " > \"$1/etc/passwd\"\n"
                       "printf 'root:x:0:\\n" + user + ":x:" + gid + ":\\nnogroup:x:65534:\\n' > \"$1/etc/group\"\n"
                       "printf 'root:*:19000:0:99999:7:::\\n" + user +
                       ":*:19000:0:99999:7:::\\n' > \"$1/etc/shadow\"\n"
                       "chmod 0640 \"$1/etc/shadow\"\n"
                       "chmod 0700 \"$1/root\"\n"
                       "chown " + uid + ":" + gid + " \"$1" + home + "\"\n"
                       "chmod 0755 \"$1" + home + "\"\n"});
  steps.push_back({"init",
                   "mkdir -p \"$1/dev\" \"$1/proc\" \"$1/sys\" \"$1/run\" \"$1/tmp\" \"$1/etc/init.d\"\n"
                   "chmod 1777 \"$1/tmp\"\n"
                   "echo cloister > \"$1/etc/hostname\"\n"
                   "cat > \"$1/etc/inittab\" <<'EOF'\n"
                   "::sysinit:/etc/init.d/rcS\n"
                   "::once:/usr/lib/cloister/boot-hook\n"
                   "::ctrlaltdel:/sbin/poweroff\n"
                   "::shutdown:/bin/umount -a -r\n"
                   "EOF\n"
                   "cat > \"$1/etc/init.d/rcS\" <<'EOF'\n"
                   "#!/bin/sh\n"
                   "mount -t proc proc /proc\n"
                   "mount -t sysfs sysfs /sys\n"
                   // The initramfs moved its /dev here (busybox has no mountpoint applet).
                   "grep -qs ' /dev devtmpfs ' /proc/mounts || mount -t devtmpfs devtmpfs /dev\n"
                   "mkdir -p /dev/pts /dev/shm\n"
                   "mount -t devpts -o gid=5,mode=620 devpts /dev/pts\n"
                   "mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs /dev/shm\n"
                   "mount -t tmpfs -o mode=0755,nosuid,nodev tmpfs /run\n"
                   "mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs /tmp\n"
                   "hostname -F /etc/hostname\n"
                   "ip link set lo up\n"
                   "EOF\n"
                   "chmod 0755 \"$1/etc/init.d/rcS\"\n"
                   "cat > \"$1/etc/profile\" <<'EOF'\n"
                   "export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\n"
                   "export LANG=C.UTF-8\n"
                   "EOF\n"});
  return steps;
}

std::string InitramfsInit(const std::vector<std::string>& module_paths, const std::string& init) {
  std::string list;
  for (const auto& p : module_paths) list += " /lib/modules/" + p;
  return "#!/bin/busybox sh\n"
         "# cloister test-image initramfs: load modules, mount root=, switch_root to its init.\n"
         "/bin/busybox mkdir -p /sbin /usr/bin /usr/sbin /proc /sys /dev /newroot\n"
         "/bin/busybox --install -s\n"
         "mount -t devtmpfs devtmpfs /dev\n"
         "mount -t proc proc /proc\n"
         "mount -t sysfs sysfs /sys\n"
         "for m in" + list + "; do\n"
         "  insmod \"$m\" 2>/dev/null || echo \"initramfs: cannot load $m\"\n"
         "done\n"
         "root=/dev/vda\n"
         "mode=rw\n"
         "for arg in $(cat /proc/cmdline); do\n"
         "  case \"$arg\" in root=/dev/*) root=${arg#root=} ;; ro) mode=ro ;; rw) mode=rw ;; esac\n"
         "done\n"
         "i=0\n"
         "while [ ! -b \"$root\" ] && [ $i -lt 200 ]; do i=$((i + 1)); sleep 0.05; done\n"
         "if ! mount -t ext4 -o \"$mode\" \"$root\" /newroot; then\n"
         "  echo \"initramfs: cannot mount $root\"\n"
         "  exec sh\n"
         "fi\n"
         "mount --move /dev /newroot/dev\n"
         "umount /proc /sys\n"
         "exec switch_root /newroot " + init + "\n";
}

std::string DebVersion(const std::vector<DebPackage>& debs, const std::string& name) {
  for (const auto& d : debs) {
    if (d.name == name) return d.version;
  }
  return "";
}

Status MakeBusyboxInitramfs(const std::string& rootfs, const KernelTree& kernel,
                            const std::string& work, const std::string& initrd, size_t* modules,
                            const std::string& init) {
  std::string ir = work + "/initramfs";
  RETURN_IF_ERROR(MakeDirs(ir + "/bin"));
  RETURN_IF_ERROR(CopyFile(rootfs + "/bin/busybox", ir + "/bin/busybox"));
  if (chmod((ir + "/bin/busybox").c_str(), 0755) != 0) return ErrnoError("chmod busybox", errno);
  ASSIGN_OR_RETURN(std::string dep, ReadFile(kernel.modules + "/modules.dep"));
  ASSIGN_OR_RETURN(std::vector<std::string> order, ModuleLoadOrder(dep, InitramfsModules()));
  for (const auto& rel : order) {
    std::string dst = ir + "/lib/modules/" + rel;
    RETURN_IF_ERROR(MakeDirs(fs::path(dst).parent_path().string()));
    RETURN_IF_ERROR(CopyFile(kernel.modules + "/" + rel, dst));
  }
  RETURN_IF_ERROR(WriteFile(ir + "/init", InitramfsInit(order, init), 0755));
  RETURN_IF_ERROR(MakeCpio(ir, initrd, kSourceDateEpoch));
  if (modules) *modules = order.size();
  return OkStatus();
}

Result<catalog::ImageEntry> FinishBusyboxImage(const std::string& root, const KernelTree& kernel,
                                               const std::string& work, const std::string& out_dir,
                                               const std::string& name, uint64_t disk_size_bytes,
                                               const std::string& version,
                                               const std::vector<catalog::PostInstallStep>& steps,
                                               Stages& stages) {
  stages.Start("initramfs");
  std::string initrd = out_dir + "/" + catalog::names::kInitrdFile;
  size_t modules = 0;
  RETURN_IF_ERROR(MakeBusyboxInitramfs(root, kernel, work, initrd, &modules));
  stages.Done(FormatSize(fs::file_size(initrd)) + ", " + std::to_string(modules) + " modules");

  stages.Start("disk");
  RETURN_IF_ERROR(MakeImageDisk(root, out_dir, name, disk_size_bytes));
  stages.Done("raw ext4 " + FormatSize(disk_size_bytes));

  stages.Start("hash");
  return FinishEntry(name, version, steps, out_dir, work, stages);
}

Result<catalog::ImageEntry> BuildTestImage(const BuildOptions& o) {
  if (o.out_dir.empty() || o.cache_dir.empty()) {
    return Error(ErrorCode::kInvalidArgument, "BuildTestImage: out_dir and cache_dir are required");
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
  ASSIGN_OR_RETURN(std::string kernel_pkg, StandardKernelPackage());
  std::vector<std::string> pkgs = TestPackages();
  pkgs.push_back(kernel_pkg);
  ASSIGN_OR_RETURN(std::vector<DebPackage> debs, FetchDebs(o.cache_dir, pkgs));
  uint64_t deb_bytes = 0;
  for (const auto& d : debs) deb_bytes += fs::file_size(d.path);
  stages.Done(std::to_string(debs.size()) + " packages, " + FormatSize(deb_bytes));

  stages.Start("kernel");
  ASSIGN_OR_RETURN(KernelTree kernel, PrepareKernel(o.cache_dir, debs.back()));
  RETURN_IF_ERROR(CopyFile(kernel.vmlinuz, o.out_dir + "/" + catalog::names::kKernelFile));
  stages.Done(kernel_pkg + " " + debs.back().version + ", vmlinuz " +
              FormatSize(fs::file_size(kernel.vmlinuz)));

  stages.Start("rootfs");
  std::string root = work + "/rootfs";
  RETURN_IF_ERROR(MakeDirs(root));
  for (size_t i = 0; i + 1 < debs.size(); ++i) RETURN_IF_ERROR(ExtractDeb(debs[i].path, root));
  ASSIGN_OR_RETURN(std::string npm_tgz,
                   EnsureNpmTarball(kTestImageNpm,
                                    o.npm_cache_dir.empty() ? NpmCacheDir() : o.npm_cache_dir,
                                    o.progress));
  RETURN_IF_ERROR(UnpackNpmTarball(npm_tgz, root + "/usr/local/lib/node_modules/npm"));
  std::vector<catalog::PostInstallStep> steps = TestPostInstall();
  RETURN_IF_ERROR(RunPostInstall(steps, root));
  RETURN_IF_ERROR(NormalizeMtimes(root, kSourceDateEpoch));
  stages.Done(FormatSize(TreeBytes(root)) + ", " + std::to_string(steps.size()) +
              " post-install steps");

  return FinishBusyboxImage(
      root, kernel, work, o.out_dir, kTestImageName,
      o.disk_size_bytes ? o.disk_size_bytes : kTestDiskSize,
      std::string(kTestRecipeVersion) + "+linux-" + debs.back().version + "+busybox-" +
          DebVersion(debs, "busybox-static") + "+node-" + DebVersion(debs, "nodejs") + "+npm-" +
          std::string(kTestImageNpm.version),
      steps, stages);
}

}  // namespace cloister::image
