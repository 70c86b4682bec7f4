// Helpers shared by the store's files (store.cc and its store_*.cc siblings); not part of the
// store's contract (store/store.h).
#pragma once

#include <openssl/rand.h>

#include <algorithm>
#include <cstdlib>
#include <set>
#include <string>

#include "base/strings.h"
#include "store/config.h"
#include "store/layout.h"

namespace cloister::store_internal {

constexpr uint64_t kMinHomeSize = 64ull << 20;
constexpr uint64_t kMaxHomeSize = 16ull << 40;

inline std::string RandomHex(size_t bytes) {
  std::string raw(bytes, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(raw.data()), static_cast<int>(bytes)) != 1) {
    // RAND_bytes failing means no entropy source: names would collide, so fall back loudly.
    std::abort();
  }
  return HexEncode(raw);
}

inline Error NoSuchWorkspace(const std::string& name) {
  return Error(ErrorCode::kNotFound, "no workspace named '" + name + "'",
               "`cloister ls` lists workspaces; `cloister create " + name + "` makes one");
}

inline std::string StemOf(DiskKind kind) {
  return std::string(kind == DiskKind::kSystem ? layout::kSystemDiskStem : layout::kHomeImageStem);
}

// True if `name` (a workspace dir entry) is a live-disk file name: system.* or home.*.
inline bool IsDiskFileName(const std::string& name) {
  return StartsWith(name, std::string(layout::kSystemDiskStem) + ".") ||
         StartsWith(name, std::string(layout::kHomeImageStem) + ".");
}

inline std::set<std::string> ReferencedFiles(const WorkspaceConfig& c) {
  std::set<std::string> out;
  for (const DiskLayer& l : c.layers) out.insert(l.file);
  return out;
}

inline std::set<std::string> PinnedFiles(const WorkspaceConfig& c) {
  std::set<std::string> out;
  if (!c.system_top.empty()) out.insert(c.system_top);
  if (!c.home_top.empty()) out.insert(c.home_top);
  for (const CheckpointRecord& r : c.checkpoints) {
    if (!r.system.empty()) out.insert(r.system);
    if (!r.home.empty()) out.insert(r.home);
  }
  return out;
}

inline void EraseLayer(WorkspaceConfig& c, const std::string& file) {
  c.layers.erase(std::remove_if(c.layers.begin(), c.layers.end(),
                                [&](const DiskLayer& l) { return l.file == file; }),
                 c.layers.end());
}

inline DiskLayer* MutableLayer(WorkspaceConfig& c, const std::string& file) {
  for (DiskLayer& l : c.layers) {
    if (l.file == file) return &l;
  }
  return nullptr;
}

}  // namespace cloister::store_internal
