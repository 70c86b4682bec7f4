// The full image recipe: Debian 12 from mmdebstrap (systemd, Debian's standard kernel and its
// initramfs, the tools a coding agent needs), then recorded post-install steps, then a raw ext4
// disk. Kernel and initramfs are copied out beside the disk for direct kernel boot.

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>

#include "base/strings.h"
#include "base/subprocess.h"
#include "catalog/names.h"
#include "catalog/sha256.h"
#include "image/boot_hook.h"
#include "image/builder.h"
#include "protocol/contract.h"

namespace cloister::image {

namespace fs = std::filesystem;

namespace {

constexpr uint64_t kFullDiskSize = 8ull << 30;  // sparse: blocks are only used as the guest writes

const std::vector<std::string>& FullPackages() {
  static const std::vector<std::string> k{
      // boot
      "systemd-sysv", "udev", "linux-image-amd64", "initramfs-tools", "kmod", "e2fsprogs",
      // what the issue asks for a coding agent
      "sudo", "git", "curl", "ca-certificates", "openssh-client", "tmux", "python3", "nodejs",
      "npm", "build-essential",
      // IDE access over SSH (guest/sshd.h: the agent runs `sshd -i` per channel stream) and
      // rsync for `rsync -e ssh`
      "openssh-server", "rsync",
      // the guest agent's transparent egress (nft redirect of outbound TCP to itself)
      "nftables",
      // small conveniences every shell user expects
      "iproute2", "procps", "less", "locales"};
  return k;
}

}  // namespace

const std::vector<std::string>& MaskedUnits() {
  static const std::vector<std::string> k{"getty@.service", "getty-static.service",
                                          "serial-getty@ttyS0.service", "e2scrub_reap.service",
                                          "e2scrub_all.service", "e2scrub_all.timer",
                                          "systemd-update-utmp-runlevel.service"};
  return k;
}

const std::vector<std::string>& UnloadedModules() {
  static const std::vector<std::string> k{
      // nested virtualization: `-cpu max` under TCG advertises SVM and VMX, and kvm_amd pulls in
      // the AMD crypto coprocessor driver (ccp) with it
      "kvm", "kvm_amd", "kvm_intel",
      // q35's ICH9: its TCO watchdog nothing arms, its LPC and SMBus with nothing on them, and
      // its AHCI controller with no disk (a workspace's disks are virtio)
      "iTCO_wdt", "iTCO_vendor_support", "intel_pmc_bxt", "lpc_ich", "i2c_i801", "ahci",
      // PC speaker and PS/2 devices (no display, no input)
      "pcspkr", "serio_raw", "psmouse",
      // CPU-feature crypto drivers (udev loads them from the CPU's modalias): nothing in a
      // workspace uses the kernel's ciphers (no dm-crypt, IPsec or kernel TLS; user space brings
      // its own; the generic ones still load on request), and under TCG aesni's self-tests asked
      // for a cryptd module per algorithm, a modprobe exec each
      "aesni_intel", "ghash_clmulni_intel", "sha1_ssse3", "sha256_ssse3", "sha512_ssse3",
      "crc32_pclmul", "crct10dif_pclmul", "polyval_clmulni",
      // frequency scaling: a VM's vCPUs have none (each fails its probe after loading; TCG's
      // `-cpu max` is an AMD model, hence powernow_k8)
      "acpi_cpufreq", "pcc_cpufreq", "powernow_k8"};
  return k;
}

const std::vector<std::string>& FullInitramfsModules() {
  static const std::vector<std::string> k{"virtio_pci", "virtio_blk", "ext4", "crc32c_generic"};
  return k;
}

namespace {

std::vector<catalog::PostInstallStep> FullPostInstall() {
  std::vector<catalog::PostInstallStep> steps;
  // The guest user of the host-guest contract (protocol/contract.h).
  const std::string user = protocol::kGuestUser, home = protocol::kGuestHome;
  const std::string uid = std::to_string(protocol::kGuestUid);
  const std::string gid = std::to_string(protocol::kGuestGid);
  steps.push_back({"user-dev",
                   "chroot \"$1\" groupadd --gid " + gid + " " + user + "\n"
                   "chroot \"$1\" useradd --uid " + uid + " --gid " + gid +
                       " --groups sudo --shell /bin/bash --home-dir " + home + " --no-create-home " +
                       user + "\n"
                       "mkdir -p \"$1" + home + "\"\n"
                       "chown " + uid + ":" + gid + " \"$1" + home + "\"\n"
                       "chmod 0755 \"$1" + home + "\"\n"
                       "printf '" + user + " ALL=(ALL) NOPASSWD:ALL\\n' > \"$1/etc/sudoers.d/cloister-dev\"\n"
                   "chmod 0440 \"$1/etc/sudoers.d/cloister-dev\"\n"});
  steps.push_back({"system",
                   "echo cloister > \"$1/etc/hostname\"\n"
                   "printf '127.0.0.1 localhost\\n127.0.1.1 cloister\\n::1 localhost ip6-localhost "
                   "ip6-loopback\\n' > \"$1/etc/hosts\"\n"
                   "printf '" + std::string(protocol::kRootDevice) +
                       " / ext4 defaults,discard 0 1\\n' > \"$1/etc/fstab\"\n"
                   "echo 'C.UTF-8 UTF-8' > \"$1/etc/locale.gen\"\n"
                   "echo 'LANG=C.UTF-8' > \"$1/etc/default/locale\"\n"});
  // sshd never listens in the guest (the agent runs `sshd -i` on channel streams): its units are
  // masked. `useradd` locks dev ("!"), which sshd without PAM refuses even for a key: "*" has
  // no password either, and is not locked. Host keys are deleted by the cleanup step (the host
  // gives each workspace its own at boot).
  steps.push_back({"sshd",
                   "ln -sf /dev/null \"$1/etc/systemd/system/ssh.service\"\n"
                   "ln -sf /dev/null \"$1/etc/systemd/system/ssh.socket\"\n"
                   "rm -f \"$1/etc/systemd/system/sshd.service\" "
                   "\"$1/etc/systemd/system/multi-user.target.wants/ssh.service\"\n"
                   "sed -i 's/^" + user + ":!:/" + user + ":*:/' \"$1/etc/shadow\"\n"});
  steps.push_back(BootHookStep());
  steps.push_back(BootServiceStep());
  // Units a workspace does not need (seen in `systemd-analyze blame` under TCG): the VM has no
  // display (-vga none), so no getty on tty1-6 (getty@ and the static fallback getty-static),
  // and its serial console is a log file nobody types into (no serial getty);
  // its disks are files on the host, so no e2scrub of LVM snapshots it does not have; and no
  // runlevel record in utmp (systemd-update-utmp-runlevel, a process started beside the boot
  // hook once multi-user.target is reached; `who -r` then prints nothing). Masked by
  // symlinks to /dev/null (what `systemctl mask` writes): the same bytes on every build.
  steps.push_back({"units",
                   "for u in " + Join(MaskedUnits(), " ") + "; do\n"
                   "  ln -sf /dev/null \"$1/etc/systemd/system/$u\"\n"
                   "done\n"
                   "rm -f \"$1/etc/systemd/system/getty.target.wants/getty@tty1.service\"\n"});
  // Modules for hardware a workspace VM has and does not use: udev loads each at boot as its
  // device appears, at ~35 ms of guest time per module under TCG (kernel text patching), while
  // the boot hook and the agent start. Blacklisted, so udev skips them; `modprobe NAME` by hand
  // still loads one.
  std::string blacklist = "# Written by the cloister image recipe: hardware a workspace VM does not use.\n";
  for (const std::string& m : UnloadedModules()) blacklist += "blacklist " + m + "\n";
  steps.push_back({"modules",
                   "mkdir -p \"$1/etc/modprobe.d\"\n"
                   "printf '" + blacklist + "' > \"$1/etc/modprobe.d/cloister-vm.conf\"\n"});
  // Debian's initramfs carries most of the kernel's drivers (MODULES=most: 35 MiB, gzip, for
  // zstd is not installed), which the kernel unpacks under TCG before init. A workspace's root
  // is ext4 on virtio-blk, so it carries only those (MODULES=list: 6.5 MiB); the root's udev
  // loads the rest from /lib/modules. SOURCE_DATE_EPOCH (the build's environment) makes it the
  // same bytes on every build.
  steps.push_back({"initramfs",
                   "printf 'MODULES=list\\nCOMPRESS=gzip\\n' > "
                   "\"$1/etc/initramfs-tools/conf.d/cloister\"\n"
                   "printf '" + Join(FullInitramfsModules(), "\\n") + "\\n' >> "
                   "\"$1/etc/initramfs-tools/modules\"\n"
                   "chroot \"$1\" update-initramfs -u -k all\n"});
  steps.push_back({"cleanup",
                   "rm -f \"$1/etc/machine-id\" \"$1/var/lib/dbus/machine-id\"\n"
                   ": > \"$1/etc/machine-id\"\n"
                   "rm -rf \"$1/var/lib/apt/lists\"/* \"$1/var/cache/apt\"/*.bin "
                   "\"$1/var/cache/ldconfig/aux-cache\" \"$1/var/cache/debconf\"/*-old "
                   "\"$1/var/lib/dpkg\"/*-old \"$1/etc/ssh\"/ssh_host_*\n"
                   "find \"$1/var/log\" -type f -exec truncate -s 0 {} +\n"
                   // apt's download directory belongs to _apt (its sandbox user); one build in
                   // three here came out of mmdebstrap with it root's (why, not found), and the
                   // disk's hash changed with it
                   "chroot \"$1\" chown _apt:root /var/cache/apt/archives/partial\n"
                   "rm -f \"$1/etc/resolv.conf\"\n"});
  return steps;
}

}  // namespace

Result<catalog::ImageEntry> BuildFullImage(const BuildOptions& o) {
  if (o.out_dir.empty()) return Error(ErrorCode::kInvalidArgument, "BuildFullImage: no out_dir");
  for (const char* tool : {"mmdebstrap", "mkfs.ext4", "chroot"}) {
    if (!ProgramExists(tool)) {
      return Error(ErrorCode::kUnavailable, std::string(tool) + " is not installed",
                   "run scripts/install-deps.sh run");
    }
  }
  if (geteuid() != 0) {
    return Error(ErrorCode::kPermissionDenied, "building the full image needs root (mmdebstrap, chroot)",
                 "run it with sudo, or use `cloister image build --test` for the test image");
  }
  ASSIGN_OR_RETURN(std::string work, FreshWorkDir(o.out_dir, o.work_dir));
  Stages stages(o.progress, 5);

  stages.Start("bootstrap (mmdebstrap bookworm, about 2 minutes)");
  std::string root = work + "/rootfs";
  RunOptions mm;
  mm.env_set = {{"SOURCE_DATE_EPOCH", std::to_string(kSourceDateEpoch)},
                {"LC_ALL", "C.UTF-8"},
                {"TZ", "UTC"},
                {"DEBIAN_FRONTEND", "noninteractive"}};
  mm.capture_stdout = true;
  mm.capture_stderr = true;
  std::vector<std::string> argv{"mmdebstrap", "--mode=root", "--format=directory",
                                "--variant=minbase", "--quiet",
                                "--include=" + Join(FullPackages(), ","),
                                "--dpkgopt=path-exclude=/usr/share/man/*",
                                "--dpkgopt=path-exclude=/usr/share/info/*",
                                "--dpkgopt=path-exclude=/usr/share/doc/*",
                                "--dpkgopt=path-include=/usr/share/doc/*/copyright",
                                "bookworm", root};
  auto mr = RunProcessChecked(argv, mm);
  if (!mr.ok()) return mr.error().WithContext("mmdebstrap");
  stages.Done(FormatSize(TreeBytes(root)) + ", " + std::to_string(FullPackages().size()) +
              " requested packages and their dependencies");

  stages.Start("post-install");
  std::vector<catalog::PostInstallStep> steps = FullPostInstall();
  RETURN_IF_ERROR(RunPostInstall(steps, root));
  stages.Done(std::to_string(steps.size()) + " steps");

  stages.Start("kernel and initramfs");
  std::string release;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(root + "/lib/modules", ec)) {
    release = e.path().filename().string();
  }
  if (release.empty()) return Error(ErrorCode::kCorrupt, "no kernel installed in the rootfs");
  std::string vmlinuz = root + "/boot/vmlinuz-" + release;
  std::string initrd = root + "/boot/initrd.img-" + release;
  RETURN_IF_ERROR(CopyFile(vmlinuz, o.out_dir + "/" + catalog::names::kKernelFile));
  RETURN_IF_ERROR(CopyFile(initrd, o.out_dir + "/" + catalog::names::kInitrdFile));
  stages.Done(release + ", vmlinuz " + FormatSize(fs::file_size(vmlinuz)) + ", initrd " +
              FormatSize(fs::file_size(initrd)));

  stages.Start("disk (mkfs.ext4 -d)");
  uint64_t size = o.disk_size_bytes ? o.disk_size_bytes : kFullDiskSize;
  RETURN_IF_ERROR(MakeImageDisk(root, o.out_dir, kFullImageName, size));
  std::string disk = o.out_dir + "/" + catalog::names::kDiskFile;
  struct stat st;
  uint64_t used = stat(disk.c_str(), &st) == 0 ? static_cast<uint64_t>(st.st_blocks) * 512 : 0;
  stages.Done("raw ext4 " + FormatSize(size) + " (" + FormatSize(used) + " allocated)");

  stages.Start("hash");
  std::string kver;
  {
    RunOptions q;
    auto r = RunProcess({"chroot", root, "dpkg-query", "-W", "-f=${Version}", "linux-image-" + release}, q);
    if (r.ok() && r->success()) kver = Trim(r->out);
  }
  return FinishEntry(kFullImageName,
                     std::string(kFullRecipeVersion) + "+linux-" + (kver.empty() ? release : kver),
                     steps, o.out_dir, work, stages);
}

}  // namespace cloister::image
