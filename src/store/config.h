// WorkspaceConfig: the JSON document workspaces/NAME/config.json (layout::kConfigFile).
//
// It is the single source of truth of a workspace: settings, image identity, MAC, compromised
// flag, and every disk layer file the workspace owns. A file of the workspace directory that
// config.json does not name (system.*, home.*, checkpoints/*) is garbage from an interrupted verb
// and is deleted by the next mutating verb.
//
// Other modules extend it: add a field here (with a default, parsed leniently) or, for a module's
// private settings, a top-level key of your own: unknown top-level keys are kept verbatim in
// `extra` and written back, so an older build never drops a newer field.
//
// Writers: only through Store (store.h), which holds the config lock and writes atomically.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/result.h"
#include "protocol/contract.h"
#include "store/layout.h"

namespace cloister {

inline constexpr int kConfigVersion = 1;
inline constexpr uint32_t kDefaultMemoryMib = 2048;
inline constexpr uint32_t kDefaultCpus = 2;
inline constexpr uint64_t kDefaultHomeSize = 64ull << 30;  // apparent size; sparse on the host
inline constexpr uint32_t kGuestUid = protocol::kGuestUid;                // guest user `dev`
inline constexpr uint32_t kGuestGid = protocol::kGuestGid;

// What the system disk is cloned from. Filled by ResolveImage (store/image_ref.h) for a raw image
// path, or by the catalog's resolver (cli/image_resolver.h) for a catalog name.
struct ImageIdentity {
  std::string name;     // catalog name, or the file name for a raw image path
  std::string version;  // catalog version, or "" for a raw image path
  std::string sha256;   // lower-case hex of the raw image bytes (the signed digest for a catalog image)
  std::string path;     // absolute path of the raw base image
  uint64_t size = 0;    // bytes; with mtime_ns a cheap "base image changed" check at start
  int64_t mtime_ns = 0;
  // Catalog images only ("" for a raw image path): the channel whose verified catalog vouched for
  // the image, and what the VM runner boots it with (absolute paths beside the disk).
  std::string channel;
  std::string kernel_path;
  std::string initrd_path;
  std::string kernel_cmdline;
};

// A host folder shared into the guest (-v HOST[:GUEST][:ro]). The store records it and never
// touches the host folder.
struct Volume {
  std::string host;   // absolute host path
  std::string guest;  // absolute guest path
  bool read_only = false;
};

enum class DiskKind { kSystem, kHome };
const char* DiskKindName(DiskKind kind);

// One file of a disk chain. Chains are trees: a checkpoint layer may back several layers.
struct DiskLayer {
  std::string file;  // relative to the workspace directory ("system.3.qcow2", "checkpoints/ID/home.img")
  DiskKind disk = DiskKind::kSystem;
  layout::DiskFormat format = layout::DiskFormat::kRaw;
  // Relative path of the layer below, "" if none. A system layer with on_base has the base image
  // (ImageIdentity::path) below it instead.
  std::string backing;
  bool on_base = false;
};

struct CheckpointRecord {
  std::string id;          // "YYYYMMDD-HHMMSS[-N]" (UTC, from the store clock); dir checkpoints/ID
  int64_t created = 0;     // unix seconds
  bool automatic = false;  // taken after a proven boot; only these are subject to retention
  std::string system;      // layer file; "" = the system disk was absent (base image state)
  std::string home;        // layer file
};

struct WorkspaceConfig {
  int version = kConfigVersion;
  std::string name;
  std::string id;     // random 128-bit hex, unique per creation (a re-created NAME gets a new id)
  int64_t created = 0;  // unix seconds
  ImageIdentity image;
  uint32_t memory_mib = kDefaultMemoryMib;
  uint32_t cpus = kDefaultCpus;
  uint64_t home_size = kDefaultHomeSize;
  std::vector<Volume> volumes;
  std::string mac;  // "02:xx:xx:xx:xx:xx", reserved in the store's MAC registry
  // The coding agent the workspace runs (base/agent_tools.h: "shell", "claude", "codex"). Kept as
  // read (a newer build's tool name survives); checked against the table where it is used
  // (create, config, the supervisor at start).
  std::string tool = "shell";

  bool compromised = false;
  std::string compromised_reason;
  int64_t compromised_at = 0;

  // Live disks: layer files (also listed in `layers`). system_top is "" after reset/wipe: the next
  // start clones the base image again (Store::EnsureSystemDisk).
  std::string system_top;
  std::string home_top;
  std::vector<DiskLayer> layers;
  std::vector<CheckpointRecord> checkpoints;  // oldest first
  uint64_t next_generation = 1;               // for live disk file names

  nlohmann::json extra = nlohmann::json::object();  // unknown top-level keys, kept verbatim

  const DiskLayer* FindLayer(const std::string& file) const;
  const CheckpointRecord* FindCheckpoint(const std::string& id) const;
};

nlohmann::json ConfigToJson(const WorkspaceConfig& config);
// Strict on what the store relies on (names, layer paths), lenient on additions.
Result<WorkspaceConfig> ConfigFromJson(const std::string& text);

// Workspace names: 1-63 characters of [a-z0-9._-], starting with a letter or digit, no "..".
// They are directory names, VM names and host names, so nothing else is accepted.
Status ValidateWorkspaceName(const std::string& name);

// A layer path inside a workspace directory: relative, no "..", no empty component, only
// [A-Za-z0-9._-] in each component. Guards every delete the store does from a config value.
bool IsSafeRelativePath(const std::string& path);

// Parses "-v HOST[:GUEST][:ro|:rw]". HOST must be an absolute path to an existing directory
// (checked by the caller's Env); GUEST defaults to /home/dev/<last component of HOST>, so a
// project lands in the guest user's home. GUEST may be inside the home, not the home itself.
Result<Volume> ParseVolumeSpec(const std::string& spec);

// Checkpoint IDs: "YYYYMMDD-HHMMSS" or with a "-N" suffix.
bool IsValidCheckpointId(const std::string& id);
std::string FormatUtcCompact(int64_t unix_seconds);   // "20261130-101500"
std::string FormatUtcIso8601(int64_t unix_seconds);   // "2026-11-30T10:15:00Z"

}  // namespace cloister
