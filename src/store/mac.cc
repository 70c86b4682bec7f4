#include "store/mac.h"

#include <openssl/evp.h>

#include <cstdio>

#include <nlohmann/json.hpp>

namespace cloister {
namespace {

constexpr uint32_t kMaxAttempts = 4096;

}  // namespace

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
  for (const auto& e : doc["entries"]) {
    if (!e.is_object() || !e.contains("mac") || !e["mac"].is_string() || !e.contains("id") ||
        !e["id"].is_string() || !e.contains("workspace") || !e["workspace"].is_string()) {
      return corrupt();
    }
    entries.push_back({e["mac"].get<std::string>(), e["workspace"].get<std::string>(),
                       e["id"].get<std::string>()});
  }
  return entries;
}

Status MacRegistry::Save(const std::vector<MacEntry>& entries) {
  nlohmann::json arr = nlohmann::json::array();
  for (const MacEntry& e : entries) {
    arr.push_back({{"mac", e.mac}, {"workspace", e.workspace}, {"id", e.id}});
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
    entries.push_back({mac, name, id});
    RETURN_IF_ERROR(Save(entries));
    return mac;
  }
  return Error(ErrorCode::kInternal, "no free MAC address for workspace " + name);
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
