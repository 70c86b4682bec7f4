#include "store/config.h"

#include <ctime>
#include <limits>
#include <type_traits>

#include "base/strings.h"
#include "protocol/contract.h"

namespace cloister {
namespace {

using nlohmann::json;

const char* kKnownKeys[] = {"version",    "name",     "id",         "created",
                            "image",      "memory_mib", "cpus",     "home_size",
                            "volumes",    "mac",      "compromised", "disks",
                            "layers",     "checkpoints", "next_generation", "tool"};

bool IsKnownKey(const std::string& key) {
  for (const char* k : kKnownKeys) {
    if (key == k) return true;
  }
  return false;
}

Error Corrupt(const std::string& what) {
  return Error(ErrorCode::kCorrupt, "config.json: " + what,
               "the workspace's config is damaged; restore it from a backup or `cloister rm` it");
}

// Typed getters that never throw: a wrong type is an error, a missing key the default.
template <typename T>
Status Get(const json& obj, const char* key, T& out) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return OkStatus();
  if constexpr (std::is_same_v<T, std::string>) {
    if (!it->is_string()) return Corrupt(std::string(key) + " is not a string");
    out = it->template get<std::string>();
  } else if constexpr (std::is_same_v<T, bool>) {
    if (!it->is_boolean()) return Corrupt(std::string(key) + " is not a boolean");
    out = it->template get<bool>();
  } else if constexpr (std::is_unsigned_v<T>) {
    if (!it->is_number_unsigned()) return Corrupt(std::string(key) + " is not a count");
    uint64_t v = it->template get<uint64_t>();
    if (v > std::numeric_limits<T>::max()) return Corrupt(std::string(key) + " is too large");
    out = static_cast<T>(v);
  } else {
    if (!it->is_number_integer()) return Corrupt(std::string(key) + " is not an integer");
    out = it->template get<T>();
  }
  return OkStatus();
}

Result<layout::DiskFormat> ParseFormat(const std::string& s) {
  if (s == "raw") return layout::DiskFormat::kRaw;
  if (s == "qcow2") return layout::DiskFormat::kQcow2;
  return Corrupt("unknown disk format '" + s + "'");
}

Result<DiskKind> ParseKind(const std::string& s) {
  if (s == "system") return DiskKind::kSystem;
  if (s == "home") return DiskKind::kHome;
  return Corrupt("unknown disk '" + s + "'");
}

bool IsNameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
}

}  // namespace

const char* DiskKindName(DiskKind kind) { return kind == DiskKind::kSystem ? "system" : "home"; }

const DiskLayer* WorkspaceConfig::FindLayer(const std::string& file) const {
  for (const DiskLayer& l : layers) {
    if (l.file == file) return &l;
  }
  return nullptr;
}

const CheckpointRecord* WorkspaceConfig::FindCheckpoint(const std::string& id) const {
  for (const CheckpointRecord& c : checkpoints) {
    if (c.id == id) return &c;
  }
  return nullptr;
}

json ConfigToJson(const WorkspaceConfig& c) {
  json doc = c.extra.is_object() ? c.extra : json::object();
  doc["version"] = c.version;
  doc["name"] = c.name;
  doc["id"] = c.id;
  doc["created"] = c.created;
  doc["image"] = {{"name", c.image.name},     {"version", c.image.version},
                  {"sha256", c.image.sha256}, {"path", c.image.path},
                  {"size", c.image.size},     {"mtime_ns", c.image.mtime_ns}};
  if (!c.image.channel.empty()) {
    doc["image"]["channel"] = c.image.channel;
    doc["image"]["kernel"] = c.image.kernel_path;
    doc["image"]["initrd"] = c.image.initrd_path;
    doc["image"]["kernel_cmdline"] = c.image.kernel_cmdline;
  }
  doc["memory_mib"] = c.memory_mib;
  doc["cpus"] = c.cpus;
  doc["home_size"] = c.home_size;
  json vols = json::array();
  for (const Volume& v : c.volumes) {
    vols.push_back({{"host", v.host}, {"guest", v.guest}, {"read_only", v.read_only}});
  }
  doc["volumes"] = vols;
  doc["mac"] = c.mac;
  doc["tool"] = c.tool;
  doc["compromised"] = {{"flag", c.compromised},
                        {"reason", c.compromised_reason},
                        {"at", c.compromised_at}};
  doc["disks"] = {{"system", c.system_top}, {"home", c.home_top}};
  json layers = json::array();
  for (const DiskLayer& l : c.layers) {
    layers.push_back({{"file", l.file},
                      {"disk", DiskKindName(l.disk)},
                      {"format", layout::DiskFormatName(l.format)},
                      {"backing", l.backing},
                      {"on_base", l.on_base}});
  }
  doc["layers"] = layers;
  json cps = json::array();
  for (const CheckpointRecord& r : c.checkpoints) {
    cps.push_back({{"id", r.id},
                   {"created", r.created},
                   {"automatic", r.automatic},
                   {"system", r.system},
                   {"home", r.home}});
  }
  doc["checkpoints"] = cps;
  doc["next_generation"] = c.next_generation;
  return doc;
}

Result<WorkspaceConfig> ConfigFromJson(const std::string& text) {
  json doc = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object()) return Corrupt("not a JSON object");
  WorkspaceConfig c;
  RETURN_IF_ERROR(Get(doc, "version", c.version));
  if (c.version != kConfigVersion) {
    return Error(ErrorCode::kFailedPrecondition,
                 "config.json version " + std::to_string(c.version) + " is not supported",
                 "use the cloister release that created this workspace");
  }
  RETURN_IF_ERROR(Get(doc, "name", c.name));
  if (!ValidateWorkspaceName(c.name).ok()) return Corrupt("invalid name");
  RETURN_IF_ERROR(Get(doc, "id", c.id));
  RETURN_IF_ERROR(Get(doc, "created", c.created));
  if (auto it = doc.find("image"); it != doc.end()) {
    if (!it->is_object()) return Corrupt("image is not an object");
    RETURN_IF_ERROR(Get(*it, "name", c.image.name));
    RETURN_IF_ERROR(Get(*it, "version", c.image.version));
    RETURN_IF_ERROR(Get(*it, "sha256", c.image.sha256));
    RETURN_IF_ERROR(Get(*it, "path", c.image.path));
    RETURN_IF_ERROR(Get(*it, "size", c.image.size));
    RETURN_IF_ERROR(Get(*it, "mtime_ns", c.image.mtime_ns));
    RETURN_IF_ERROR(Get(*it, "channel", c.image.channel));
    RETURN_IF_ERROR(Get(*it, "kernel", c.image.kernel_path));
    RETURN_IF_ERROR(Get(*it, "initrd", c.image.initrd_path));
    RETURN_IF_ERROR(Get(*it, "kernel_cmdline", c.image.kernel_cmdline));
  }
  RETURN_IF_ERROR(Get(doc, "memory_mib", c.memory_mib));
  RETURN_IF_ERROR(Get(doc, "cpus", c.cpus));
  RETURN_IF_ERROR(Get(doc, "home_size", c.home_size));
  if (auto it = doc.find("volumes"); it != doc.end()) {
    if (!it->is_array()) return Corrupt("volumes is not an array");
    for (const json& v : *it) {
      if (!v.is_object()) return Corrupt("volume is not an object");
      Volume vol;
      RETURN_IF_ERROR(Get(v, "host", vol.host));
      RETURN_IF_ERROR(Get(v, "guest", vol.guest));
      RETURN_IF_ERROR(Get(v, "read_only", vol.read_only));
      c.volumes.push_back(vol);
    }
  }
  RETURN_IF_ERROR(Get(doc, "mac", c.mac));
  RETURN_IF_ERROR(Get(doc, "tool", c.tool));
  if (c.tool.empty() || c.tool.size() > 64) return Corrupt("tool is empty or too long");
  if (auto it = doc.find("compromised"); it != doc.end()) {
    if (!it->is_object()) return Corrupt("compromised is not an object");
    RETURN_IF_ERROR(Get(*it, "flag", c.compromised));
    RETURN_IF_ERROR(Get(*it, "reason", c.compromised_reason));
    RETURN_IF_ERROR(Get(*it, "at", c.compromised_at));
  }
  if (auto it = doc.find("disks"); it != doc.end()) {
    if (!it->is_object()) return Corrupt("disks is not an object");
    RETURN_IF_ERROR(Get(*it, "system", c.system_top));
    RETURN_IF_ERROR(Get(*it, "home", c.home_top));
  }
  if (auto it = doc.find("layers"); it != doc.end()) {
    if (!it->is_array()) return Corrupt("layers is not an array");
    for (const json& j : *it) {
      if (!j.is_object()) return Corrupt("layer is not an object");
      DiskLayer l;
      std::string disk, format;
      RETURN_IF_ERROR(Get(j, "file", l.file));
      RETURN_IF_ERROR(Get(j, "disk", disk));
      RETURN_IF_ERROR(Get(j, "format", format));
      RETURN_IF_ERROR(Get(j, "backing", l.backing));
      RETURN_IF_ERROR(Get(j, "on_base", l.on_base));
      ASSIGN_OR_RETURN(l.disk, ParseKind(disk));
      ASSIGN_OR_RETURN(l.format, ParseFormat(format));
      if (!IsSafeRelativePath(l.file)) return Corrupt("unsafe layer path '" + l.file + "'");
      if (!l.backing.empty() && !IsSafeRelativePath(l.backing)) {
        return Corrupt("unsafe backing path '" + l.backing + "'");
      }
      c.layers.push_back(l);
    }
  }
  if (auto it = doc.find("checkpoints"); it != doc.end()) {
    if (!it->is_array()) return Corrupt("checkpoints is not an array");
    for (const json& j : *it) {
      if (!j.is_object()) return Corrupt("checkpoint is not an object");
      CheckpointRecord r;
      RETURN_IF_ERROR(Get(j, "id", r.id));
      RETURN_IF_ERROR(Get(j, "created", r.created));
      RETURN_IF_ERROR(Get(j, "automatic", r.automatic));
      RETURN_IF_ERROR(Get(j, "system", r.system));
      RETURN_IF_ERROR(Get(j, "home", r.home));
      if (!IsValidCheckpointId(r.id)) return Corrupt("invalid checkpoint id '" + r.id + "'");
      c.checkpoints.push_back(r);
    }
  }
  RETURN_IF_ERROR(Get(doc, "next_generation", c.next_generation));
  // Every layer referenced must be listed.
  auto listed = [&](const std::string& f) { return f.empty() || c.FindLayer(f) != nullptr; };
  if (!listed(c.system_top) || !listed(c.home_top)) return Corrupt("live disk not in layers");
  for (const DiskLayer& l : c.layers) {
    if (!listed(l.backing)) return Corrupt("backing of " + l.file + " not in layers");
  }
  for (const CheckpointRecord& r : c.checkpoints) {
    if (!listed(r.system) || !listed(r.home)) return Corrupt("checkpoint " + r.id + " layer missing");
  }
  for (auto& [key, value] : doc.items()) {
    if (!IsKnownKey(key)) c.extra[key] = value;
  }
  return c;
}

Status ValidateWorkspaceName(const std::string& name) {
  auto bad = [&](const std::string& why) {
    return Error(ErrorCode::kInvalidArgument, "invalid workspace name '" + name + "': " + why,
                 "use 1-63 characters of a-z, 0-9, '.', '_', '-', starting with a letter or digit");
  };
  if (name.empty()) return bad("empty");
  if (name.size() > 63) return bad("longer than 63 characters");
  if (!((name[0] >= 'a' && name[0] <= 'z') || (name[0] >= '0' && name[0] <= '9'))) {
    return bad("must start with a lower-case letter or a digit");
  }
  for (char c : name) {
    if (!IsNameChar(c)) {
      if (c == '/') return bad("'/' is not allowed");
      if (c >= 'A' && c <= 'Z') return bad("upper-case letters are not allowed");
      return bad("character '" + std::string(1, c) + "' is not allowed");
    }
  }
  if (name.find("..") != std::string::npos) return bad("'..' is not allowed");
  return OkStatus();
}

bool IsSafeRelativePath(const std::string& path) {
  if (path.empty() || path.size() > 255 || path[0] == '/') return false;
  for (const std::string& part : Split(path, '/')) {
    if (part.empty() || part == "." || part == "..") return false;
    for (char c : part) {
      bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                c == '.' || c == '_' || c == '-';
      if (!ok) return false;
    }
  }
  return true;
}

Result<Volume> ParseVolumeSpec(const std::string& spec) {
  auto bad = [&](const std::string& why) {
    return Error(ErrorCode::kInvalidArgument, "invalid volume '" + spec + "': " + why,
                 "use -v /host/dir[:/guest/dir][:ro]");
  };
  std::vector<std::string> parts = Split(spec, ':');
  Volume v;
  if (parts.size() > 1 && (parts.back() == "ro" || parts.back() == "rw")) {
    v.read_only = parts.back() == "ro";
    parts.pop_back();
  }
  if (parts.empty() || parts.size() > 2) return bad("expected HOST[:GUEST][:ro]");
  v.host = parts[0];
  v.guest = parts.size() == 2 ? parts[1] : "";
  if (v.host.empty() || v.host[0] != '/') return bad("host path must be absolute");
  if (v.guest.empty()) {
    // Default: a folder of that name in the guest user's home (mounted after the home disk).
    std::string h = v.host;
    while (h.size() > 1 && h.back() == '/') h.pop_back();
    std::string base = h.substr(h.rfind('/') + 1);
    if (base.empty()) return bad("give a guest path for the host root: HOST:GUEST");
    v.guest = std::string(protocol::kGuestHome) + "/" + base;
  }
  if (v.guest.empty() || v.guest[0] != '/') return bad("guest path must be absolute");
  for (std::string* p : {&v.host, &v.guest}) {
    for (const std::string& part : Split(*p, '/')) {
      if (part == "..") return bad("'..' is not allowed");
    }
    while (p->size() > 1 && p->back() == '/') p->pop_back();
  }
  // Inside the home is fine (/home/dev/project); the home itself, /, and the agent's own
  // directories are not.
  const std::string home = protocol::kGuestHome;
  if (v.guest == "/" || v.guest == home || v.guest == "/home" ||
      (StartsWith(v.guest, "/home/") && !StartsWith(v.guest, home + "/")) ||
      StartsWith(v.guest, protocol::kGuestRunDir)) {
    return bad("guest path " + v.guest + " is reserved");
  }
  return v;
}

bool IsValidCheckpointId(const std::string& id) {
  // YYYYMMDD-HHMMSS then optionally -N (N: 1-6 digits).
  if (id.size() < 15 || id.size() > 22) return false;
  for (size_t i = 0; i < 15; ++i) {
    if (i == 8) {
      if (id[i] != '-') return false;
    } else if (id[i] < '0' || id[i] > '9') {
      return false;
    }
  }
  if (id.size() == 15) return true;
  if (id[15] != '-' || id.size() == 16) return false;
  for (size_t i = 16; i < id.size(); ++i) {
    if (id[i] < '0' || id[i] > '9') return false;
  }
  return true;
}

std::string FormatUtcCompact(int64_t unix_seconds) {
  time_t t = static_cast<time_t>(unix_seconds);
  struct tm tm;
  gmtime_r(&t, &tm);
  char buf[32];
  strftime(buf, sizeof(buf), "%Y%m%d-%H%M%S", &tm);
  return buf;
}

std::string FormatUtcIso8601(int64_t unix_seconds) {
  time_t t = static_cast<time_t>(unix_seconds);
  struct tm tm;
  gmtime_r(&t, &tm);
  char buf[32];
  strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

}  // namespace cloister
