#include "image/boot_hook.h"

namespace cloister::image {

std::string BootHookScript() {
  // The values come from protocol/contract.h; the text (signed into every catalog entry) is the
  // same bytes it was when they were spelled here.
  const std::string agent = kAgentName;
  std::string modules;
  for (const char* m : protocol::kEgressKernelModules) modules += std::string(" ") + m;
  return std::string(R"HOOK(#!/bin/sh
# cloister boot hook: mount the per-boot metadata disk and start the guest agent from it.
# See docs/design.md, "Contracts between host and guest". Installed by the image's post-install
# step "boot-hook", recorded in the signed catalog.
# The first line on the console: where a bare boot of the same image and a cloister boot are
# compared (bench/vm_boot_bench).
echo "cloister-boot-hook: started"
# The transparent egress's netfilter modules, loaded in the background while this hook mounts the
# metadata disk and the agent starts: the kernel's work for them (~0.7 s of guest time under TCG)
# is most of the agent's setup, which loads them too and waits for these loads (its rules are
# what it waits for; this only starts the work earlier). Loaded already (the test image's
# initramfs): no process. In a subshell, so init reaps it, not the agent this hook becomes (which
# reaps only its own children). Output dropped: nothing of it may print at boot.
[ -d /sys/module/nf_tables ] || (modprobe -a -q)HOOK" + modules + R"HOOK( >/dev/null 2>&1 &)
META=)HOOK") + kMetaMountPoint + "\nDEV=" + kMetaDevice + R"HOOK(
# systemd made it (the unit's RuntimeDirectory); the busybox image's rcS did not: a test, not a
# process, when it is there.
[ -d "$META" ] || mkdir -p "$META"
i=0
while [ ! -b "$DEV" ]; do
  i=$((i + 1))
  if [ "$i" -gt 300 ]; then
    echo "cloister-boot-hook: $DEV did not appear" >&2
    exit 1
  fi
  sleep 0.1
done
# Mounted already (a restarted hook)? Shell builtins only: one process fewer on the boot's path,
# and busybox's root has no mountpoint applet.
mounted=0
while read -r _ where _; do
  [ "$where" = "$META" ] && mounted=1
done < /proc/mounts
if [ "$mounted" = 0 ]; then
  mount -t ext4 -o ro,nodev,nosuid "$DEV" "$META" || {
    echo "cloister-boot-hook: cannot mount $DEV at $META" >&2
    exit 1
  }
fi
if [ ! -x "$META/)HOOK" + agent + R"HOOK(" ]; then
  echo "cloister-boot-hook: $META/)HOOK" + agent + R"HOOK( is missing" >&2
  exit 1
fi
echo "cloister-boot-hook: starting $META/)HOOK" + agent + R"HOOK("
exec "$META/)HOOK" + agent + R"HOOK(" --meta "$META"
)HOOK";
}

catalog::PostInstallStep BootHookStep() {
  return {"boot-hook",
          "mkdir -p \"$1/usr/lib/cloister\"\n"
          "cat > \"$1/usr/lib/cloister/boot-hook\" <<'CLOISTER_HOOK_EOF'\n" +
              BootHookScript() +
              "CLOISTER_HOOK_EOF\n"
              "chmod 0755 \"$1/usr/lib/cloister/boot-hook\"\n"};
}

catalog::PostInstallStep BootServiceStep() {
  return {"boot-service",
          "mkdir -p \"$1/etc/systemd/system/multi-user.target.wants\"\n"
          "cat > \"$1/etc/systemd/system/cloister-boot.service\" <<'CLOISTER_UNIT_EOF'\n"
          "[Unit]\n"
          "Description=cloister boot hook (metadata disk and guest agent)\n"
          "After=local-fs.target\n"
          "Wants=local-fs.target\n"
          "\n"
          "[Service]\n"
          "Type=simple\n"
          "ExecStart=/usr/lib/cloister/boot-hook\n"
          "RuntimeDirectory=cloister/meta\n"
          "RuntimeDirectoryPreserve=yes\n"
          "StandardOutput=journal+console\n"
          "StandardError=journal+console\n"
          "\n"
          "[Install]\n"
          "WantedBy=multi-user.target\n"
          "CLOISTER_UNIT_EOF\n"
          "ln -sf /etc/systemd/system/cloister-boot.service "
          "\"$1/etc/systemd/system/multi-user.target.wants/cloister-boot.service\"\n"};
}

}  // namespace cloister::image
