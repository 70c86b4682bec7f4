#include "image/oci/finish.h"

#include <filesystem>

#include "catalog/names.h"
#include "image/boot_hook.h"
#include "image/busybox_root.h"
#include "image/debs.h"
#include "protocol/contract.h"

namespace cloister::image::oci {

std::string InitScript() {
  return R"INIT(#!/usr/lib/cloister/busybox sh
# cloister's init for an image from an OCI source (image/oci/finish.h): the image has no init of
# its own, so cloister's static busybox mounts what a Linux userland expects, starts the boot hook
# (which execs the guest agent from the metadata disk) and stays PID 1: it reaps orphans and
# powers off when asked (busybox's poweroff sends SIGUSR2).
B=/usr/lib/cloister/busybox
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:/usr/lib/cloister/bin
for d in /proc /sys /dev /run /tmp; do [ -d "$d" ] || $B mkdir -p "$d"; done
$B mount -t proc proc /proc
$B mount -t sysfs sysfs /sys
$B grep -qs ' /dev devtmpfs ' /proc/mounts || $B mount -t devtmpfs devtmpfs /dev
$B mkdir -p /dev/pts /dev/shm
$B mount -t devpts -o gid=5,mode=620,ptmxmode=0666 devpts /dev/pts
[ -e /dev/ptmx ] || $B ln -s pts/ptmx /dev/ptmx
$B mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs /dev/shm
$B mount -t tmpfs -o mode=0755,nosuid,nodev tmpfs /run
$B mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs /tmp
$B hostname cloister
$B ip link set lo up
down() {
  $B sync
  $B umount -a -r >/dev/null 2>&1
  $B poweroff -f
}
trap down USR2 TERM
trap '$B sync; $B reboot -f' INT
PATH=/usr/lib/cloister/bin:$PATH $B sh /usr/lib/cloister/boot-hook &
while :; do
  $B sleep 5 &
  wait $!
done
)INIT";
}

catalog::PostInstallStep FinishStep() {
  const std::string user = protocol::kGuestUser, home = protocol::kGuestHome;
  const std::string uid = std::to_string(protocol::kGuestUid);
  const std::string gid = std::to_string(protocol::kGuestGid);
  std::string text =
      "# cloister's parts into the image's rootfs (a chroot of it; image/oci/finish.h)\n"
      "B=/.cloister-parts/busybox\n"
      "$B rm -rf /usr/lib/cloister\n"
      "$B mkdir -p /usr/lib/cloister/bin\n"
      "$B cp /.cloister-parts/busybox /usr/lib/cloister/busybox\n"
      "B=/usr/lib/cloister/busybox\n"
      "$B chmod 0755 $B\n"
      "for a in $($B --list); do $B ln -s ../busybox \"/usr/lib/cloister/bin/$a\"; done\n"
      "$B cat > /usr/lib/cloister/init <<'CLOISTER_INIT_EOF'\n" + InitScript() +
      "CLOISTER_INIT_EOF\n"
      "$B cat > /usr/lib/cloister/boot-hook <<'CLOISTER_HOOK_EOF'\n" + BootHookScript() +
      "CLOISTER_HOOK_EOF\n"
      "$B chmod 0755 /usr/lib/cloister/init /usr/lib/cloister/boot-hook\n"
      "for d in /proc /sys /dev /run /tmp /root /etc /home; do [ -d \"$d\" ] || $B mkdir -p \"$d\"; "
      "done\n"
      "$B chmod 1777 /tmp\n"
      "[ -e /etc/passwd ] || $B touch /etc/passwd\n"
      "[ -e /etc/group ] || $B touch /etc/group\n"
      "$B grep -q '^root:' /etc/passwd || { $B echo 'root:x:0:0:root:/root:/bin/sh' | $B cat - "
      "/etc/passwd > /etc/passwd.new && $B mv /etc/passwd.new /etc/passwd; }\n"
      "$B grep -q '^root:' /etc/group || $B echo 'root:x:0:' >> /etc/group\n"
      "shell=/bin/sh\n"
      "[ -x /bin/sh ] || shell=/usr/lib/cloister/bin/sh\n"
      "line=$($B grep '^" + user + ":' /etc/passwd || true)\n"
      "if [ -n \"$line\" ]; then\n"
      "  [ \"$($B echo \"$line\" | $B cut -d: -f3)\" = " + uid + " ] || {\n"
      "    echo 'cloister-build: error user the image has a user " + user + " whose uid is not " +
      uid + "'\n"
      "    exit 1\n"
      "  }\n"
      "else\n"
      "  $B echo \"" + user + ":x:" + uid + ":" + gid + ":" + user + ":" + home +
      ":$shell\" >> /etc/passwd\n"
      "fi\n"
      "$B grep -q '^" + user + ":' /etc/group || $B echo '" + user + ":x:" + gid +
      ":' >> /etc/group\n"
      "if [ -e /etc/shadow ] && ! $B grep -q '^" + user + ":' /etc/shadow; then\n"
      "  $B echo '" + user + ":*:19000:0:99999:7:::' >> /etc/shadow\n"
      "fi\n"
      "$B mkdir -p " + home + "\n"
      "$B chown " + uid + ":" + gid + " " + home + "\n"
      "[ -e /etc/hostname ] || $B echo cloister > /etc/hostname\n"
      "has() { for p in $2; do [ -x \"$p\" ] && { $B echo 1; return; }; done; $B echo 0; }\n"
      "$B echo \"cloister-build: has tmux=$(has tmux '/usr/bin/tmux /bin/tmux /usr/local/bin/tmux')"
      " sshd=$(has sshd '/usr/sbin/sshd /sbin/sshd') sh=$(has sh /bin/sh)\"\n"
      "$B rm -rf /.cloister-parts\n";
  return {"cloister-finish", text};
}

Result<BootParts> PrepareBootParts(const std::string& cache_dir, const std::string& work,
                                   const std::string& out_dir) {
  ASSIGN_OR_RETURN(std::string kernel_pkg, StandardKernelPackage());
  ASSIGN_OR_RETURN(std::vector<DebPackage> debs, FetchDebs(cache_dir, {"busybox-static", kernel_pkg}));
  ASSIGN_OR_RETURN(KernelTree kernel, PrepareKernel(cache_dir, debs[1]));
  RETURN_IF_ERROR(MakeDirs(out_dir));
  RETURN_IF_ERROR(CopyFile(kernel.vmlinuz, out_dir + "/" + catalog::names::kKernelFile));
  std::string bb = work + "/busybox-root";
  RETURN_IF_ERROR(ExtractDeb(debs[0].path, bb));
  RETURN_IF_ERROR(MakeBusyboxInitramfs(bb, kernel, work, out_dir + "/" + catalog::names::kInitrdFile,
                                       nullptr, kInitPath));
  return BootParts{bb + "/bin/busybox", debs[1].version, debs[0].version};
}

}  // namespace cloister::image::oci
