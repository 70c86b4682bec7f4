// The environments cloister's long-lived children start with (issue 15 item 3). The supervisor and
// QEMU never inherit the CLI's environment: a user who exported ANTHROPIC_API_KEY (or any other
// secret) in the shell that ran `cloister start` must not hand it to QEMU, which the threat model
// assumes compromised, nor to the supervisor, whose environ QEMU's uid may read when it is the
// user's. Each child gets an explicit list built here; nothing else passes.
//
//   supervisor: PATH (the caller's, or a default), LANG=C, DBUS_SESSION_BUS_ADDRESS (the vault's
//               Secret Service key backend needs the session bus), and the CLOISTER_* overrides
//               the supervisor reads (kSupervisorVariables; docs/design.md lists them).
//   QEMU:       PATH and LANG=C only.
#pragma once

#include <array>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace cloister::vm {

// What a variable's value is looked up with (std::getenv in production; a table in tests).
// Returns nullptr when unset.
using EnvLookup = std::function<const char*(const char*)>;

// PATH when the caller has none.
inline constexpr char kDefaultPath[] = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

// The caller's variables the supervisor keeps (when set and non-empty), besides PATH: each is
// read by code the supervisor runs (vault/keys.cc, supervisor/egress.cc, supervisor.cc,
// vm/meta_disk.cc).
inline constexpr std::array<std::string_view, 17> kSupervisorVariables = {
    "DBUS_SESSION_BUS_ADDRESS",     // vault: Secret Service key backend
    "CLOISTER_VAULT_KEY_BACKEND",   // vault: file | secret-service
    "CLOISTER_TCG_CPU",             // QEMU -cpu under TCG
    "CLOISTER_KERNEL_BOOT",         // pvh (default) | bzimage (benches)
    "CLOISTER_TCG_TB_SIZE",         // TCG's translation cache, MiB (benches)
    "CLOISTER_FREE_PAGE_REPORTING",  // 0: no balloon (benches)
    "CLOISTER_DISK_AIO",            // threads | io_uring | native (benches)
    "CLOISTER_DISK_CACHE",          // writeback | none (benches)
    "CLOISTER_DISK_IOTHREAD",       // 1: an iothread per disk (benches)
    "CLOISTER_GUEST_NPM_REGISTRY",  // the guest's npm registry (tests)
    "CLOISTER_PROXY_RESOLVE",       // egress proxy upstream overrides (tests, debugging)
    "CLOISTER_PROXY_UPSTREAM_CA",
    "CLOISTER_AGENT_BIN",           // the guest agent binary put on the metadata disk
    "CLOISTER_AUDIT_BIN",           // the residue audit helper put on the metadata disk
    "CLOISTER_BINARY_DIR",          // a build tree's binaries (tests)
    "CLOISTER_BROWSER_FILES",       // extra files for the browser VM (tests; browser_vm.h)
    "CLOISTER_BROWSER_IMAGE",       // the automatic start's browser image (tests; browser_vm.h)
};

// "NAME=value" entries for the supervisor's exec.
std::vector<std::string> SupervisorEnvironment(const EnvLookup& lookup);
std::vector<std::string> SupervisorEnvironment();  // from our own environment

// "NAME=value" entries for QEMU's exec.
std::vector<std::string> QemuEnvironment(const EnvLookup& lookup);
std::vector<std::string> QemuEnvironment();

}  // namespace cloister::vm
