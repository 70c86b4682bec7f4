#include "catalog/catalog.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include <set>

namespace cloister::catalog {

namespace {

using nlohmann::json;

constexpr uint64_t kMaxArtifactBytes = 1ull << 40;  // 1 TiB

bool IsHex64(std::string_view s) {
  if (s.size() != 64) return false;
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

// Printable ASCII, no control characters, bounded.
bool IsPrintable(std::string_view s, size_t max) {
  if (s.size() > max) return false;
  for (unsigned char c : s) {
    if (c < 0x20 || c > 0x7e) return false;
  }
  return true;
}

Error Malformed(const std::string& what) { return Rejected(Rejection::kMalformed, what); }

// Checks that `obj` is an object with exactly `keys`.
Status ExactKeys(const json& obj, std::initializer_list<const char*> keys, const std::string& where) {
  if (!obj.is_object()) return Malformed(where + " is not an object");
  std::set<std::string> want(keys.begin(), keys.end());
  for (const auto& [k, v] : obj.items()) {
    if (!want.count(k)) return Malformed(where + ": unknown field \"" + k.substr(0, 64) + "\"");
  }
  for (const auto& k : want) {
    if (!obj.contains(k)) return Malformed(where + ": missing field \"" + k + "\"");
  }
  return OkStatus();
}

Result<std::string> GetString(const json& obj, const char* key, const std::string& where) {
  const json& v = obj.at(key);
  if (!v.is_string()) return Malformed(where + "." + key + " is not a string");
  return v.get<std::string>();
}

Result<uint64_t> GetUnsigned(const json& obj, const char* key, const std::string& where) {
  const json& v = obj.at(key);
  if (!v.is_number_unsigned()) return Malformed(where + "." + key + " is not an unsigned integer");
  return v.get<uint64_t>();
}

// Length-prefixed encoding helpers for CanonicalBytes.
void PutU64(std::string& out, uint64_t v) {
  for (int i = 7; i >= 0; --i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
void PutBytes(std::string& out, std::string_view s) {
  PutU64(out, s.size());
  out.append(s);
}
// A tagged field: tag then value, both length-prefixed.
void PutField(std::string& out, std::string_view tag, std::string_view value) {
  PutBytes(out, tag);
  PutBytes(out, value);
}
void PutFieldU64(std::string& out, std::string_view tag, uint64_t v) {
  PutBytes(out, tag);
  PutU64(out, 8);
  PutU64(out, v);
}

// The optional "provenance" object of an image: {KEY: VALUE} (entry.h's bounds).
Status ParseProvenance(const json& j, const std::string& where, ImageEntry& e) {
  if (!j.is_object() || j.size() > kMaxProvenance) {
    return Malformed(where + ".provenance must be an object of at most " +
                     std::to_string(kMaxProvenance) + " strings");
  }
  for (const auto& [k, v] : j.items()) {
    bool key_ok = !k.empty() && k.size() <= 32;
    for (char c : k) {
      if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '.')) key_ok = false;
    }
    if (!key_ok) return Malformed(where + ".provenance: invalid key");
    if (!v.is_string() || !IsPrintable(v.get<std::string>(), 512)) {
      return Malformed(where + ".provenance." + k + " is not a printable string of at most 512 bytes");
    }
    e.provenance.emplace_back(k, v.get<std::string>());  // json objects iterate sorted
  }
  return OkStatus();
}

Result<ImageEntry> ParseImage(const json& j, size_t index) {
  std::string where = "images[" + std::to_string(index) + "]";
  ImageEntry e;
  if (j.is_object() && j.contains("provenance")) {
    RETURN_IF_ERROR(ParseProvenance(j.at("provenance"), where, e));
    json rest = j;
    rest.erase("provenance");
    ASSIGN_OR_RETURN(ImageEntry parsed, ParseImage(rest, index));
    parsed.provenance = std::move(e.provenance);
    return parsed;
  }
  RETURN_IF_ERROR(ExactKeys(j, {"name", "version", "arch", "kernel_cmdline", "artifacts",
                                "post_install"},
                            where));
  ASSIGN_OR_RETURN(e.name, GetString(j, "name", where));
  ASSIGN_OR_RETURN(e.version, GetString(j, "version", where));
  ASSIGN_OR_RETURN(e.arch, GetString(j, "arch", where));
  ASSIGN_OR_RETURN(e.kernel_cmdline, GetString(j, "kernel_cmdline", where));
  if (!IsValidName(e.name)) return Malformed(where + ": invalid image name");
  if (e.version.empty() || !IsPrintable(e.version, 128) ||
      e.version.find(' ') != std::string::npos) {
    return Malformed(where + ": invalid version");
  }
  if (e.arch != "amd64") return Malformed(where + ": unsupported arch");
  if (!IsPrintable(e.kernel_cmdline, 1024)) return Malformed(where + ": invalid kernel_cmdline");
  const json& arts = j.at("artifacts");
  if (!arts.is_array() || arts.size() != 3) {
    return Malformed(where + ".artifacts must list disk, kernel and initrd");
  }
  std::set<std::string> roles, files;
  for (size_t i = 0; i < arts.size(); ++i) {
    std::string aw = where + ".artifacts[" + std::to_string(i) + "]";
    RETURN_IF_ERROR(ExactKeys(arts[i], {"role", "file", "size", "sha256"}, aw));
    Artifact a;
    ASSIGN_OR_RETURN(a.role, GetString(arts[i], "role", aw));
    ASSIGN_OR_RETURN(a.file, GetString(arts[i], "file", aw));
    ASSIGN_OR_RETURN(a.size, GetUnsigned(arts[i], "size", aw));
    ASSIGN_OR_RETURN(a.sha256, GetString(arts[i], "sha256", aw));
    if (a.role != kRoleDisk && a.role != kRoleKernel && a.role != kRoleInitrd) {
      return Malformed(aw + ": unknown role");
    }
    if (!IsValidFileName(a.file)) return Malformed(aw + ": invalid file name");
    if (a.size == 0 || a.size > kMaxArtifactBytes) return Malformed(aw + ": invalid size");
    if (!IsHex64(a.sha256)) return Malformed(aw + ": sha256 is not 64 lower-case hex digits");
    if (!roles.insert(a.role).second) return Malformed(aw + ": duplicate role");
    if (!files.insert(a.file).second) return Malformed(aw + ": duplicate file");
    e.artifacts.push_back(std::move(a));
  }
  const json& steps = j.at("post_install");
  if (!steps.is_array() || steps.size() > kMaxSteps) {
    return Malformed(where + ".post_install must be a list of at most " +
                     std::to_string(kMaxSteps) + " steps");
  }
  for (size_t i = 0; i < steps.size(); ++i) {
    std::string sw = where + ".post_install[" + std::to_string(i) + "]";
    RETURN_IF_ERROR(ExactKeys(steps[i], {"name", "command"}, sw));
    PostInstallStep s;
    ASSIGN_OR_RETURN(s.name, GetString(steps[i], "name", sw));
    ASSIGN_OR_RETURN(s.command, GetString(steps[i], "command", sw));
    if (!IsValidName(s.name)) return Malformed(sw + ": invalid step name");
    if (s.command.size() > kMaxCommandBytes) return Malformed(sw + ": command too long");
    if (s.command.find('\0') != std::string::npos) return Malformed(sw + ": NUL in command");
    e.post_install.push_back(std::move(s));
  }
  return e;
}

}  // namespace

const char* RejectionToken(Rejection r) {
  switch (r) {
    case Rejection::kMissingSignature: return "missing-signature";
    case Rejection::kBadSignature: return "bad-signature";
    case Rejection::kUnknownKey: return "unknown-key";
    case Rejection::kKeyNotForChannel: return "key-not-for-channel";
    case Rejection::kWrongChannel: return "wrong-channel";
    case Rejection::kRollback: return "rollback";
    case Rejection::kArtifactMismatch: return "artifact-mismatch";
    case Rejection::kMissingArtifact: return "missing-artifact";
    case Rejection::kMalformed: return "malformed";
  }
  return "unknown";
}

Error Rejected(Rejection r, const std::string& detail) {
  ErrorCode code = ErrorCode::kCorrupt;
  std::string hint;
  switch (r) {
    case Rejection::kMissingSignature:
      hint = "a catalog is only adopted with its catalog.json.sig; get both from the publisher";
      code = ErrorCode::kPermissionDenied;
      break;
    case Rejection::kUnknownKey:
    case Rejection::kKeyNotForChannel:
      hint = "trust the publisher's key first: `cloister image trust KEYFILE --channel NAME`";
      code = ErrorCode::kPermissionDenied;
      break;
    case Rejection::kRollback:
      hint = "an older catalog cannot replace a newer one; get the publisher's latest catalog";
      code = ErrorCode::kFailedPrecondition;
      break;
    case Rejection::kArtifactMismatch:
    case Rejection::kMissingArtifact:
      hint = "rebuild (`cloister image build`) or re-import the image";
      break;
    default:
      break;
  }
  return Error(code, std::string("catalog rejected (") + RejectionToken(r) + "): " + detail, hint);
}

std::optional<Rejection> RejectionOf(const Error& e) {
  static const std::string kPrefix = "catalog rejected (";
  const std::string& m = e.message();
  size_t at = m.find(kPrefix);
  if (at == std::string::npos) return std::nullopt;
  size_t start = at + kPrefix.size();
  size_t end = m.find(')', start);
  if (end == std::string::npos) return std::nullopt;
  std::string token = m.substr(start, end - start);
  for (Rejection r : {Rejection::kMissingSignature, Rejection::kBadSignature,
                      Rejection::kUnknownKey, Rejection::kKeyNotForChannel,
                      Rejection::kWrongChannel, Rejection::kRollback,
                      Rejection::kArtifactMismatch, Rejection::kMissingArtifact,
                      Rejection::kMalformed}) {
    if (token == RejectionToken(r)) return r;
  }
  return std::nullopt;
}

bool IsValidName(std::string_view name) {
  if (name.empty() || name.size() > 64) return false;
  if (!((name[0] >= 'a' && name[0] <= 'z') || (name[0] >= '0' && name[0] <= '9'))) return false;
  for (char c : name) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.';
    if (!ok) return false;
  }
  return true;
}

bool IsValidFileName(std::string_view name) {
  if (name.empty() || name.size() > 128 || name == "." || name == "..") return false;
  for (char c : name) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '-' || c == '_' || c == '.';
    if (!ok) return false;
  }
  return name[0] != '.';
}

Result<Catalog> ParseCatalog(std::string_view text) {
  // SECURITY: untrusted input. Size-bounded before parsing; nlohmann's parser does not throw with
  // allow_exceptions=false; every access below is type-checked.
  if (text.empty()) return Malformed("empty document");
  if (text.size() > kMaxCatalogBytes) return Malformed("document larger than 4 MiB");
  json j = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Malformed("not valid JSON (truncated?)");
  RETURN_IF_ERROR(ExactKeys(j, {"format", "channel", "sequence", "signed_at", "images"}, "catalog"));
  ASSIGN_OR_RETURN(std::string format, GetString(j, "format", "catalog"));
  if (format != kCatalogFormat) return Malformed("unsupported format \"" + format.substr(0, 64) + "\"");
  Catalog c;
  ASSIGN_OR_RETURN(c.channel, GetString(j, "channel", "catalog"));
  if (!IsValidName(c.channel)) return Malformed("invalid channel name");
  ASSIGN_OR_RETURN(c.sequence, GetUnsigned(j, "sequence", "catalog"));
  if (c.sequence == 0) return Malformed("sequence must be at least 1");
  ASSIGN_OR_RETURN(uint64_t signed_at, GetUnsigned(j, "signed_at", "catalog"));
  if (signed_at > (1ull << 40)) return Malformed("signed_at out of range");
  c.signed_at = static_cast<int64_t>(signed_at);
  const json& images = j.at("images");
  if (!images.is_array() || images.size() > kMaxImages) {
    return Malformed("images must be a list of at most " + std::to_string(kMaxImages));
  }
  std::set<std::string> names;
  for (size_t i = 0; i < images.size(); ++i) {
    ASSIGN_OR_RETURN(ImageEntry e, ParseImage(images[i], i));
    if (!names.insert(e.name).second) return Malformed("duplicate image " + e.name);
    c.images.push_back(std::move(e));
  }
  return c;
}

std::string SerializeCatalog(const Catalog& c) {
  json images = json::array();
  for (const auto& e : c.images) {
    json arts = json::array();
    for (const auto& a : e.artifacts) {
      arts.push_back({{"role", a.role}, {"file", a.file}, {"size", a.size}, {"sha256", a.sha256}});
    }
    json steps = json::array();
    for (const auto& s : e.post_install) steps.push_back({{"name", s.name}, {"command", s.command}});
    json image = {{"name", e.name},
                  {"version", e.version},
                  {"arch", e.arch},
                  {"kernel_cmdline", e.kernel_cmdline},
                  {"artifacts", arts},
                  {"post_install", steps}};
    if (!e.provenance.empty()) {
      json prov = json::object();
      for (const auto& [k, v] : e.provenance) prov[k] = v;
      image["provenance"] = prov;
    }
    images.push_back(image);
  }
  json doc = {{"format", kCatalogFormat},
              {"channel", c.channel},
              {"sequence", c.sequence},
              {"signed_at", static_cast<uint64_t>(c.signed_at)},
              {"images", images}};
  return doc.dump(2) + "\n";
}

std::string CanonicalBytes(const Catalog& c) {
  std::string out;
  PutBytes(out, kCanonicalDomain);
  PutField(out, "format", kCatalogFormat);
  PutField(out, "channel", c.channel);
  PutFieldU64(out, "sequence", c.sequence);
  PutFieldU64(out, "signed_at", static_cast<uint64_t>(c.signed_at));
  PutFieldU64(out, "images", c.images.size());
  for (const auto& e : c.images) {
    PutField(out, "image.name", e.name);
    PutField(out, "image.version", e.version);
    PutField(out, "image.arch", e.arch);
    PutField(out, "image.kernel_cmdline", e.kernel_cmdline);
    PutFieldU64(out, "image.artifacts", e.artifacts.size());
    for (const auto& a : e.artifacts) {
      PutField(out, "artifact.role", a.role);
      PutField(out, "artifact.file", a.file);
      PutFieldU64(out, "artifact.size", a.size);
      PutField(out, "artifact.sha256", a.sha256);
    }
    PutFieldU64(out, "image.post_install", e.post_install.size());
    for (const auto& s : e.post_install) {
      PutField(out, "step.name", s.name);
      PutField(out, "step.command", s.command);
    }
    // Only when there is one: a catalog signed before the field existed keeps its bytes. The
    // tag differs from "image.name" and "end", which are what follows an image otherwise.
    if (!e.provenance.empty()) {
      auto sorted = e.provenance;  // the order the JSON object gives back when parsed
      std::sort(sorted.begin(), sorted.end());
      PutFieldU64(out, "image.provenance", sorted.size());
      for (const auto& [k, v] : sorted) {
        PutField(out, "provenance.key", k);
        PutField(out, "provenance.value", v);
      }
    }
  }
  PutBytes(out, "end");
  return out;
}

}  // namespace cloister::catalog
