#include "image/boot_hook.h"

namespace cloister::image {

std::string BootHookScript() {
  // The values come from protocol/contract.h; the text (signed into every catalog entry) is the
  // same bytes it was when they were spelled here.
  const std::string agent = kAgentName;
  return std::string(R"HOOK(#!/bin/sh
# cloister boot hook: mount the per-boot metadata disk and start the guest agent from it.
# See docs/design.md, "Contracts between host and guest". Installed by the image's post-install
# step "boot-hook", recorded in the signed catalog.
# The first line on the console: where a bare boot of the same image and a cloister boot are
# compared (bench/vm_boot_bench).
echo "cloister-boot-hook: started"
META=)HOOK") + kMetaMountPoint + "\nDEV=" + kMetaDevice + R"HOOK(
mkdir -p "$META"
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
