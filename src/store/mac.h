// Workspace MAC addresses and the store-wide registry (layout::kMacRegistryFile).
//
// A workspace's MAC is locally administered unicast (first octet: 0x02 set, 0x01 clear), derived
// from SHA-256 of its name (and an attempt counter when that address is taken), so re-creating a
// workspace gives it the same MAC unless another workspace holds it. The registry maps each MAC
// to the workspace id that holds it, and allocates each workspace its QEMU id (the offset of the
// unprivileged uid/gid QEMU runs under as root, vm/qemu_access.h): kQemuIdSpace ids, unique
// within the store (issue 15 item 13: deriving it from 24 bits of the MAC let two workspaces whose
// MACs differ only in the first three octets share one uid). The preferred id is the MAC's low 24
// bits (so existing workspaces keep theirs); a taken one moves to the next free id. Entries of an
// older registry without "qemu_id" get theirs, in file order, the first time one is asked for.
//
// Synchronisation: every function that writes the registry must be called with the store lock
// held (Store does this); the file is rewritten atomically (temp, fsync, rename).
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "base/result.h"
#include "store/env.h"

namespace cloister {

struct MacEntry {
  std::string mac;        // "02:1a:2b:3c:4d:5e"
  std::string workspace;  // name, for humans
  std::string id;         // WorkspaceConfig::id: the owner
  std::optional<uint32_t> qemu_id;  // 0 .. kQemuIdSpace-1; absent in registries before item 13
};

inline constexpr uint32_t kQemuIdSpace = 1u << 24;
// The id no workspace gets: the image builder VMs' (supervisor/builder_vm.h), so a builder's
// QEMU never runs under the uid of a workspace's QEMU.
inline constexpr uint32_t kBuilderQemuId = kQemuIdSpace - 1;
// The low 24 bits of `mac` (a valid MAC), the id a workspace gets when it is free.
uint32_t PreferredQemuId(const std::string& mac);

// Candidate `attempt` (0, 1, ...) for `name`.
std::string DeriveMac(const std::string& name, uint32_t attempt);
// True for "xx:xx:xx:xx:xx:xx" lower-case hex with the locally-administered bit set and the
// multicast bit clear.
bool IsLocalUnicastMac(const std::string& mac);

class MacRegistry {
 public:
  MacRegistry(Env* env, std::string path) : env_(env), path_(std::move(path)) {}

  // Missing file = empty registry. A malformed one is kCorrupt.
  Result<std::vector<MacEntry>> Load();
  // Returns the MAC held by `id`, or reserves the first free candidate for `name` together with
  // a QEMU id no other entry holds.
  Result<std::string> Reserve(const std::string& name, const std::string& id);
  // The QEMU id of `id`'s entry; allocates (and saves) the ids of entries that have none. kNotFound
  // if `id` holds no entry.
  Result<uint32_t> QemuIdOf(const std::string& id);
  // Drops every entry of `id` (nothing to do is fine).
  Status Release(const std::string& id);
  // Drops entries whose id is not in `live_ids` (leftovers of crashed creates). Returns how many.
  Result<size_t> Retain(const std::set<std::string>& live_ids);

 private:
  Status Save(const std::vector<MacEntry>& entries);

  Env* env_;
  std::string path_;
};

}  // namespace cloister
