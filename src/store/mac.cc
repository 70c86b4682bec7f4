#include "store/mac.h"

#include <openssl/evp.h>

#include <cstdio>

#include <nlohmann/json.hpp>

namespace cloister {
namespace {

constexpr uint32_t kMaxAttempts = 4096;

// Gives every entry without a QEMU id its preferred id, or the next free one, in entry order.
// False if ids ran out (16M workspaces in one store).
bool AssignQemuIds(std::vector<MacEntry>& entries) {
  std::set<uint32_t> used{kBuilderQemuId};
  for (const MacEntry& e : entries) {
    if (e.qemu_id) used.insert(*e.qemu_id);
  }
  for (MacEntry& e : entries) {
    if (e.qemu_id) continue;
    if (used.size() >= kQemuIdSpace) return false;  // (kBuilderQemuId counts as used)
    uint32_t q = PreferredQemuId(e.mac);
    while (used.count(q)) q = (q + 1) % kQemuIdSpace;
    e.qemu_id = q;
    used.insert(q);
  }
  return true;
}

}  // namespace

uint32_t PreferredQemuId(const std::string& mac) {
  std::string hex;
  for (char c : mac) {
    if (c != ':') hex += c;
  }
  if (hex.size() != 12 || hex.find_first_not_of("0123456789abcdefABCDEF") != std::string::npos) return 0;
  return static_cast<uint32_t>(std::stoul(hex.substr(6), nullptr, 16)) % kQemuIdSpace;
}

std::string DeriveMac(const std::string& name, uint32_t attempt) {
  std::string input = "cloister-mac\n" + name + "\n" + std::to_string(attempt);
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(input.data(), input.size(), digest, &len, EVP_sha256(), nullptr);
  digest[0] = static_cast<unsigned char>((digest[0] | 0x02) & ~0x01);
  char buf[18];
  std::snprintf(buf, sizeof(buf), "%02x:%02x:%02x:%02x:%02x:%02x", digest[0], digest[1], digest[2],
                digest[3], digest[4], digest[5]);
  return buf;
}

bool IsLocalUnicastMac(const std::string& mac) {
  if (mac.size() != 17) return false;
  for (size_t i = 0; i < 17; ++i) {
    char c = mac[i];
    if (i % 3 == 2) {
      if (c != ':') return false;
    } else if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) {
      return false;
    }
  }
  unsigned first = static_cast<unsigned>(std::stoul(mac.substr(0, 2), nullptr, 16));
  return (first & 0x02) && !(first & 0x01);
}

Result<std::vector<MacEntry>> MacRegistry::Load() {
  ASSIGN_OR_RETURN(FileInfo info, env_->Stat(path_));
  std::vector<MacEntry> entries;
  if (!info.exists) return entries;
  ASSIGN_OR_RETURN(std::string text, env_->ReadFile(path_));
  auto corrupt = [&] {
    return Error(ErrorCode::kCorrupt, "MAC registry " + path_ + " is malformed",
                 "move it aside; cloister rebuilds it from the workspaces' configs");
  };
  nlohmann::json doc = nlohmann::json::parse(text, nullptr, false);
  if (doc.is_discarded() || !doc.is_object() || !doc.contains("entries") ||
      !doc["entries"].is_array()) {
    return corrupt();
  }
  std::set<uint32_t> qemu_ids;
  for (const auto& e : doc["entries"]) {
    if (!e.is_object() || !e.contains("mac") || !e["mac"].is_string() || !e.contains("id") ||
        !e["id"].is_string() || !e.contains("workspace") || !e["workspace"].is_string()) {
      return corrupt();
    }
    MacEntry entry{e["mac"].get<std::string>(), e["workspace"].get<std::string>(),
                   e["id"].get<std::string>(), std::nullopt};
    if (auto q = e.find("qemu_id"); q != e.end()) {
      // SECURITY: two workspaces never share a QEMU uid; a registry that says otherwise is refused.
      if (!q->is_number_unsigned() || q->get<uint64_t>() >= kQemuIdSpace ||
          !qemu_ids.insert(q->get<uint32_t>()).second) {
        return corrupt();
      }
      entry.qemu_id = q->get<uint32_t>();
    }
    entries.push_back(std::move(entry));
  }
  return entries;
}

Status MacRegistry::Save(const std::vector<MacEntry>& entries) {
  nlohmann::json arr = nlohmann::json::array();
  for (const MacEntry& e : entries) {
    nlohmann::json j = {{"mac", e.mac}, {"workspace", e.workspace}, {"id", e.id}};
    if (e.qemu_id) j["qemu_id"] = *e.qemu_id;
    arr.push_back(std::move(j));
  }
  nlohmann::json doc = {{"version", 1}, {"entries", arr}};
  return env_->AtomicWriteFile(path_, doc.dump(2) + "\n");
}

Result<std::string> MacRegistry::Reserve(const std::string& name, const std::string& id) {
  ASSIGN_OR_RETURN(std::vector<MacEntry> entries, Load());
  std::set<std::string> taken;
  for (const MacEntry& e : entries) {
    if (e.id == id) return e.mac;
    taken.insert(e.mac);
  }
  for (uint32_t attempt = 0; attempt < kMaxAttempts; ++attempt) {
    std::string mac = DeriveMac(name, attempt);
    if (taken.count(mac)) continue;
    entries.push_back({mac, name, id, std::nullopt});
    if (!AssignQemuIds(entries)) {
      return Error(ErrorCode::kInternal, "no free QEMU id in this store",
                   "remove workspaces you no longer need (`cloister rm NAME`)");
    }
    RETURN_IF_ERROR(Save(entries));
    return mac;
  }
  return Error(ErrorCode::kInternal, "no free MAC address for workspace " + name);
}

Result<uint32_t> MacRegistry::QemuIdOf(const std::string& id) {
  ASSIGN_OR_RETURN(std::vector<MacEntry> entries, Load());
  for (const MacEntry& e : entries) {
    if (e.id == id && e.qemu_id) return *e.qemu_id;
  }
  bool missing = false;
  for (const MacEntry& e : entries) missing |= !e.qemu_id;
  if (missing) {
    if (!AssignQemuIds(entries)) {
      return Error(ErrorCode::kInternal, "no free QEMU id in this store",
                   "remove workspaces you no longer need (`cloister rm NAME`)");
    }
    RETURN_IF_ERROR(Save(entries));
    for (const MacEntry& e : entries) {
      if (e.id == id) return *e.qemu_id;
    }
  }
  return Error(ErrorCode::kNotFound, "the MAC registry " + path_ + " has no entry for workspace id " + id,
               "recreate the workspace, or restore the registry from a backup");
}

Status MacRegistry::Release(const std::string& id) {
  ASSIGN_OR_RETURN(std::vector<MacEntry> entries, Load());
  std::vector<MacEntry> kept;
  for (const MacEntry& e : entries) {
    if (e.id != id) kept.push_back(e);
  }
  if (kept.size() == entries.size()) return OkStatus();
  return Save(kept);
}

Result<size_t> MacRegistry::Retain(const std::set<std::string>& live_ids) {
  ASSIGN_OR_RETURN(std::vector<MacEntry> entries, Load());
  std::vector<MacEntry> kept;
  for (const MacEntry& e : entries) {
    if (live_ids.count(e.id)) kept.push_back(e);
  }
  size_t dropped = entries.size() - kept.size();
  if (dropped) RETURN_IF_ERROR(Save(kept));
  return dropped;
}

}  // namespace cloister
