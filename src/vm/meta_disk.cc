#include "vm/meta_disk.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>

#include "base/file_util.h"
#include "base/strings.h"
#include "base/subprocess.h"

namespace cloister::vm {

namespace fs = std::filesystem;
using nlohmann::json;

nlohmann::json MetaConfigJson(const MetaConfig& config) {
  json shares = json::array();
  for (const MetaShare& s : config.shares) {
    shares.push_back({{"tag", s.tag}, {"path", s.guest_path}, {"readonly", s.readonly}});
  }
  json env = json::object();
  for (const auto& [k, v] : config.env) env[k] = v;
  json files = json::array();
  for (const MetaConfig::File& f : config.files) {
    files.push_back({{"path", f.path}, {"content", f.content}, {"mode", f.mode}, {"owner", f.owner}});
  }
  json doc = {{"version", 1},          {"workspace", config.workspace},
          {"hostname", config.workspace}, {"boot_id", config.boot_id},
          {"user", protocol::kGuestUser}, {"uid", protocol::kGuestUid},
          {"gid", protocol::kGuestGid}, {"home", protocol::kGuestHome},
          {"home_device", protocol::kHomeDevice}, {"channel_port", protocol::kChannelPortName},
          {"shares", shares},      {"env", env},
          {"files", files},        {"ca_certificate", config.ca_certificate},
          // Transparent egress is always on (guest/transparent.h): the agent answers DNS with
          // synthetic addresses and redirects all TCP to the host's "egress" service.
          {"transparent", {{"service", kMetaTransparentService},
                           {"port", kMetaTransparentPort},
                           {"dns_port", kMetaTransparentDnsPort}}},
          {"tool", config.tool},   {"workdir", config.workdir},
          {"auto_ports", config.auto_ports}};
  if (!config.forwards.empty()) {
    json forwards = json::array();
    for (const MetaForward& f : config.forwards) {
      forwards.push_back({{"listen", f.listen}, {"service", f.service}});
    }
    doc["forwards"] = forwards;
  }
  if (!config.devcontainer.is_null()) doc["devcontainer"] = config.devcontainer;
  if (config.no_home) doc["home_device"] = "";
  if (config.browser) {
    doc["home_device"] = "";  // a browser VM has no home disk
    doc["browser"] = {{"cdp_port", config.browser->cdp_port},
                      {"profile_device", config.browser->profile_device}};
  }
  return doc;
}

Status BuildMetaDisk(const std::string& image_path, const std::string& agent_binary,
                     const MetaConfig& config, const MetaFiles& extra,
                     const MetaExecutables& executables) {
  std::string stage = image_path + ".d";
  std::error_code ec;
  fs::remove_all(stage, ec);
  fs::remove(image_path, ec);
  if (!fs::create_directories(stage, ec) && ec) {
    return Error(ErrorCode::kIo, "create " + stage + ": " + ec.message());
  }
  auto cleanup = [&] { std::error_code e; fs::remove_all(stage, e); };
  uint64_t total = 0;
  fs::copy_file(agent_binary, stage + "/" + kMetaAgentName, ec);
  if (ec) {
    cleanup();
    return Error(ErrorCode::kNotFound, "copy guest agent " + agent_binary + ": " + ec.message(),
                 "build the cloister-agent target or set CLOISTER_AGENT_BIN");
  }
  chmod((stage + "/" + kMetaAgentName).c_str(), 0755);
  total += fs::file_size(agent_binary, ec);
  std::string cfg = MetaConfigJson(config).dump(2) + "\n";
  Status st = WriteFile(stage + "/" + kMetaConfigName, cfg, 0644);
  total += cfg.size();
  for (const auto& [name, data] : extra) {
    if (!st.ok()) break;
    if (name.empty() || name.find('/') != std::string::npos || name == "." || name == "..") {
      st = Error(ErrorCode::kInvalidArgument, "metadata file name '" + name + "'");
      break;
    }
    st = WriteFile(stage + "/" + name, data, 0644);
    total += data.size();
  }
  for (const auto& [name, host_path] : executables) {
    if (!st.ok()) break;
    if (name.empty() || name.find('/') != std::string::npos || name == "." || name == "..") {
      st = Error(ErrorCode::kInvalidArgument, "metadata file name '" + name + "'");
      break;
    }
    fs::copy_file(host_path, stage + "/" + name, fs::copy_options::overwrite_existing, ec);
    if (ec) {
      st = Error(ErrorCode::kNotFound, "copy " + host_path + ": " + ec.message());
      break;
    }
    chmod((stage + "/" + name).c_str(), 0755);
    total += fs::file_size(host_path, ec);
  }
  if (!st.ok()) {
    cleanup();
    return st;
  }
  // Room for ext4 metadata: double the payload plus 4 MiB, rounded to MiB, at least 8 MiB.
  // 4 KiB blocks: mke2fs picks 1 KiB for a file this small, and copies `-d`'s files a block per
  // write (8.7 MB: 8,688 pwrites against 2,150; 0.10-0.11 s against 0.06-0.07 s of each boot).
  uint64_t size_mib = std::max<uint64_t>(8, (total * 2) / (1 << 20) + 4);
  auto out = RunProcessChecked({"mkfs.ext4", "-q", "-F", "-b", "4096", "-L", kMetaLabel, "-O",
                                "^has_journal", "-E", "root_owner=0:0", "-d", stage, image_path,
                                std::to_string(size_mib) + "M"});
  cleanup();
  if (!out.ok()) return out.error().WithContext("build metadata disk");
  return OkStatus();
}

Result<std::string> FindHelperBinary(const std::string& name, const std::string& env_var,
                                     const std::string& module) {
  std::vector<std::string> candidates;
  if (const char* env = std::getenv(env_var.c_str()); env && *env) {
    if (access(env, R_OK) == 0) return std::string(env);
    return Error(ErrorCode::kNotFound, env_var + "=" + std::string(env) + " is not readable");
  }
  std::error_code ec;
  fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    fs::path dir = self.parent_path();
    candidates.push_back((dir / name).string());
    candidates.push_back((dir / ".." / module / name).string());
    candidates.push_back((dir / ".." / "src" / module / name).string());
  }
  candidates.push_back("/usr/lib/cloister/" + name);
  for (const std::string& c : candidates) {
    if (access(c.c_str(), R_OK) == 0) return fs::weakly_canonical(c, ec).string();
  }
  return Error(ErrorCode::kNotFound, name + " not found (looked next to the cloister binary)",
               "build the " + name + " target or set " + env_var);
}

Result<std::string> FindAgentBinary() {
  return FindHelperBinary("cloister-agent", "CLOISTER_AGENT_BIN", "guest");
}

std::string NewBootId() {
  std::random_device rd;
  std::string raw(16, '\0');
  for (char& c : raw) c = static_cast<char>(rd() & 0xff);
  return HexEncode(raw);
}

}  // namespace cloister::vm
