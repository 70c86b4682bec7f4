// The boot hook shared by every cloister base image (docs/design.md, "Contracts between host and
// guest"). It is installed by a post-install step, so its exact text is recorded in and signed by
// the catalog entry.
//
// The hook mounts /dev/vdc (ext4, label CLOISTER-META, read-only) at /run/cloister/meta and execs
// /run/cloister/meta/cloister-agent --meta /run/cloister/meta. The agent binary is never part of
// the image. The VM module (metadata disk) and the guest agent rely on these paths.
#pragma once

#include <string>

#include "catalog/entry.h"
#include "protocol/contract.h"

namespace cloister::image {

inline constexpr char kBootHookPath[] = "/usr/lib/cloister/boot-hook";
inline constexpr char kBootServiceName[] = "cloister-boot.service";
// The host-guest contract's values the recipes and the hook use (defined in protocol/contract.h).
using protocol::kAgentName;
using protocol::kGuestUid;
using protocol::kGuestUser;
using protocol::kKernelCmdline;
using protocol::kMetaDevice;
using protocol::kMetaLabel;
using protocol::kMetaMountPoint;

// The line the hook prints first on the console (bench/vm_boot_bench's common point).
inline constexpr char kBootHookStartedLine[] = "cloister-boot-hook: started";

// The hook script itself (POSIX sh; runs on busybox and on Debian).
std::string BootHookScript();

// Post-install step writing the hook to $1/usr/lib/cloister/boot-hook (mode 0755).
catalog::PostInstallStep BootHookStep();

// Post-install step adding cloister-boot.service (WantedBy multi-user.target) for systemd images.
catalog::PostInstallStep BootServiceStep();

}  // namespace cloister::image
