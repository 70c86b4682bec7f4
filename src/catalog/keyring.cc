#include "catalog/keyring.h"

#include "base/file_util.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "base/strings.h"
#include "catalog/catalog.h"
#include "catalog/signing.h"

namespace cloister::catalog {

using nlohmann::json;

bool TrustedKey::AllowsChannel(const std::string& channel) const {
  return std::find(channels.begin(), channels.end(), channel) != channels.end();
}

Status WriteFileAtomic(const std::string& path, std::string_view content, unsigned mode) {
  return cloister::WriteFileAtomic(path, content, static_cast<mode_t>(mode));
}

Result<Keyring> Keyring::Load(const std::string& path) {
  Keyring k;
  std::ifstream in(path);
  if (!in) return k;
  std::stringstream ss;
  ss << in.rdbuf();
  std::string text = ss.str();
  if (text.size() > (1 << 20)) return Error(ErrorCode::kCorrupt, path + " is too large");
  json j = json::parse(text, nullptr, false);
  auto bad = [&](const std::string& why) {
    return Error(ErrorCode::kCorrupt, "keyring " + path + ": " + why,
                 "restore it or delete it and trust the publishers again");
  };
  if (j.is_discarded() || !j.is_object() || !j.contains("keys") || !j["keys"].is_array()) {
    return bad("not a keyring document");
  }
  for (const auto& e : j["keys"]) {
    if (!e.is_object() || !e.contains("public_key") || !e["public_key"].is_string() ||
        !e.contains("channels") || !e["channels"].is_array()) {
      return bad("malformed key entry");
    }
    auto pub = HexDecode(e["public_key"].get<std::string>());
    if (!pub.ok() || pub->size() != 32) return bad("public_key is not 32 bytes of hex");
    TrustedKey t;
    t.public_key = *pub;
    t.id = KeyIdOf(t.public_key);
    for (const auto& c : e["channels"]) {
      if (!c.is_string() || !IsValidName(c.get<std::string>())) return bad("invalid channel");
      t.channels.push_back(c.get<std::string>());
    }
    if (e.contains("comment") && e["comment"].is_string()) t.comment = e["comment"];
    k.keys_.push_back(std::move(t));
  }
  return k;
}

Status Keyring::Save(const std::string& path) const {
  json keys = json::array();
  for (const auto& t : keys_) {
    keys.push_back({{"id", t.id},
                    {"public_key", HexEncode(t.public_key)},
                    {"channels", t.channels},
                    {"comment", t.comment}});
  }
  json doc = {{"format", "cloister-keyring-v1"}, {"keys", keys}};
  return WriteFileAtomic(path, doc.dump(2) + "\n", 0644);
}

const TrustedKey* Keyring::Find(const std::string& id) const {
  for (const auto& t : keys_) {
    if (t.id == id) return &t;
  }
  return nullptr;
}

void Keyring::Trust(const std::string& public_key, const std::string& channel,
                    const std::string& comment) {
  std::string id = KeyIdOf(public_key);
  for (auto& t : keys_) {
    if (t.id == id) {
      if (!t.AllowsChannel(channel)) t.channels.push_back(channel);
      return;
    }
  }
  keys_.push_back({id, public_key, {channel}, comment});
}

std::string FormatPublicKey(std::string_view public_key, std::string_view comment) {
  std::string c;
  for (char ch : comment) c += (ch >= 0x20 && ch <= 0x7e) ? ch : '_';
  return std::string(kPublicKeyFormat) + " ed25519 " + HexEncode(public_key) +
         (c.empty() ? "" : " " + c) + "\n";
}

Result<std::string> ParsePublicKey(std::string_view text) {
  if (text.size() > 4096) return Error(ErrorCode::kInvalidArgument, "public key file too large");
  std::string line(text.substr(0, text.find('\n')));
  std::vector<std::string> parts = Split(line, ' ');
  if (parts.size() < 3 || parts[0] != kPublicKeyFormat || parts[1] != "ed25519") {
    return Error(ErrorCode::kInvalidArgument,
                 std::string("not a publisher key (expected \"") + kPublicKeyFormat +
                     " ed25519 HEX\")",
                 "get it from the publisher with `cloister image key`");
  }
  auto pub = HexDecode(parts[2]);
  if (!pub.ok() || pub->size() != 32) {
    return Error(ErrorCode::kInvalidArgument, "publisher key is not 32 bytes of hex");
  }
  return *pub;
}

}  // namespace cloister::catalog
