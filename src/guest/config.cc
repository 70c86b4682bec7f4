#include "guest/config.h"

#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "base/agent_tools.h"

namespace cloister::guest {
namespace {

Error Bad(const std::string& what) { return Error(ErrorCode::kCorrupt, "config.json: " + what); }

bool ValidEnvName(const std::string& k) {
  if (k.empty() || k.size() > 128) return false;
  for (size_t i = 0; i < k.size(); ++i) {
    char c = k[i];
    bool ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_' || (i > 0 && c >= '0' && c <= '9');
    if (!ok) return false;
  }
  return true;
}

// "/dev/" and 1..32 of [a-z0-9]: a device node name, nothing that walks elsewhere.
bool ValidDevicePath(const std::string& p) {
  if (p.rfind("/dev/", 0) != 0 || p.size() <= 5 || p.size() > 5 + 32) return false;
  for (size_t i = 5; i < p.size(); ++i) {
    char ch = p[i];
    if (!((ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9'))) return false;
  }
  return true;
}

// "serial:" and a virtio-blk serial (at most 20 bytes in virtio): [a-z0-9-], 1..20.
bool ValidDiskSerial(const std::string& p) {
  if (p.rfind(kProfileSerialPrefix, 0) != 0) return false;
  std::string s = p.substr(std::string(kProfileSerialPrefix).size());
  if (s.empty() || s.size() > 20) return false;
  for (char ch : s) {
    if (!((ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '-')) return false;
  }
  return true;
}

}  // namespace

Result<AgentConfig> ParseAgentConfig(const std::string& text) {
  auto j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return Bad("not a JSON object");
  AgentConfig c;
  auto str = [&](const char* key, std::string& out) -> Status {
    if (!j.contains(key) || j[key].is_null()) return OkStatus();
    if (!j[key].is_string()) return Bad(std::string(key) + " must be a string");
    out = j[key].get<std::string>();
    return OkStatus();
  };
  if (j.contains("version")) {
    if (!j["version"].is_number_integer()) return Bad("version must be an integer");
    c.version = j["version"].get<int>();
    if (c.version != 1) return Bad("unsupported version " + std::to_string(c.version));
  }
  RETURN_IF_ERROR(str("workspace", c.workspace));
  RETURN_IF_ERROR(str("hostname", c.hostname));
  RETURN_IF_ERROR(str("boot_id", c.boot_id));
  RETURN_IF_ERROR(str("user", c.user));
  RETURN_IF_ERROR(str("home", c.home));
  RETURN_IF_ERROR(str("home_device", c.home_device));
  RETURN_IF_ERROR(str("channel_port", c.channel_port));
  if (j.contains("ready_timeout_s") && j["ready_timeout_s"].is_number_integer()) {
    c.ready_timeout_s = j["ready_timeout_s"].get<int>();
  }
  if (j.contains("shares")) {
    if (!j["shares"].is_array()) return Bad("shares must be an array");
    for (const auto& s : j["shares"]) {
      if (!s.is_object() || !s.contains("tag") || !s["tag"].is_string() || !s.contains("path") ||
          !s["path"].is_string()) {
        return Bad("each share needs a tag and a path");
      }
      ShareConfig sc{s["tag"].get<std::string>(), s["path"].get<std::string>(), false};
      if (s.contains("readonly") && s["readonly"].is_boolean()) sc.readonly = s["readonly"].get<bool>();
      if (sc.path.empty() || sc.path[0] != '/') return Bad("share path must be absolute");
      c.shares.push_back(sc);
    }
  }
  if (j.contains("env")) {
    if (!j["env"].is_object()) return Bad("env must be an object");
    for (auto it = j["env"].begin(); it != j["env"].end(); ++it) {
      if (!ValidEnvName(it.key()) || !it.value().is_string()) return Bad("bad env entry " + it.key());
      c.env[it.key()] = it.value().get<std::string>();
    }
  }
  if (j.contains("files")) {
    if (!j["files"].is_array()) return Bad("files must be an array");
    for (const auto& f : j["files"]) {
      if (!f.is_object() || !f.contains("path") || !f["path"].is_string() ||
          !f.contains("content") || !f["content"].is_string()) {
        return Bad("each file needs a path and a content");
      }
      FileConfig fc;
      fc.path = f["path"].get<std::string>();
      fc.content = f["content"].get<std::string>();
      if (fc.path.empty() || fc.path[0] != '/') return Bad("file path must be absolute");
      if (f.contains("mode") && f["mode"].is_number_unsigned()) fc.mode = f["mode"].get<unsigned>() & 07777;
      if (f.contains("owner") && f["owner"].is_string()) fc.owner = f["owner"].get<std::string>();
      c.files.push_back(fc);
    }
  }
  if (j.contains("ca_certificate")) {
    if (!j["ca_certificate"].is_string()) return Bad("ca_certificate must be a string");
    c.ca_certificate = j["ca_certificate"].get<std::string>();
    if (!c.ca_certificate.empty() &&
        c.ca_certificate.rfind("-----BEGIN CERTIFICATE-----", 0) != 0) {
      return Bad("ca_certificate must be one PEM certificate");
    }
  }
  if (j.contains("transparent") && !j["transparent"].is_null()) {
    const auto& t = j["transparent"];
    if (!t.is_object()) return Bad("transparent must be an object");
    c.transparent.enabled = true;
    if (t.contains("enabled")) {
      if (!t["enabled"].is_boolean()) return Bad("transparent.enabled must be a boolean");
      c.transparent.enabled = t["enabled"].get<bool>();
    }
    if (t.contains("service")) {
      if (!t["service"].is_string() || t["service"].get<std::string>().empty()) {
        return Bad("transparent.service must be a service name");
      }
      c.transparent.service = t["service"].get<std::string>();
    }
    for (auto [key, out] : {std::pair<const char*, int*>{"port", &c.transparent.port},
                            {"dns_port", &c.transparent.dns_port}}) {
      if (!t.contains(key)) continue;
      if (!t[key].is_number_integer() || t[key].get<int64_t>() < 1 || t[key].get<int64_t>() > 65535) {
        return Bad(std::string("transparent.") + key + " must be a port (1..65535)");
      }
      *out = t[key].get<int>();
    }
  }
  // SECURITY: the tool name only selects a row of the compiled-in table (package, version and
  // command never come from the config); the workdir is an absolute path handed to tmux as one
  // argv element.
  RETURN_IF_ERROR(str("tool", c.tool));
  if (!FindAgentTool(c.tool)) return Bad("unknown tool '" + c.tool.substr(0, 64) + "'");
  RETURN_IF_ERROR(str("workdir", c.workdir));
  if (!c.workdir.empty() && (c.workdir[0] != '/' || c.workdir.size() > 4096 ||
                             c.workdir.find('\0') != std::string::npos)) {
    return Bad("workdir must be an absolute path");
  }
  if (j.contains("auto_ports") && !j["auto_ports"].is_null()) {
    if (!j["auto_ports"].is_boolean()) return Bad("auto_ports must be a boolean");
    c.auto_ports = j["auto_ports"].get<bool>();
  }
  if (j.contains("browser") && !j["browser"].is_null()) {
    // SECURITY: the port becomes one argv element of Chromium's command line and the device a
    // mount source: both are checked to be exactly a port and a /dev/NAME path or a disk serial
    // (which the agent resolves through /sys/block/*/serial, guest/browser.h).
    const auto& b = j["browser"];
    if (!b.is_object()) return Bad("browser must be an object");
    c.browser.enabled = true;
    if (b.contains("cdp_port")) {
      if (!b["cdp_port"].is_number_integer() || b["cdp_port"].get<int64_t>() < 1 ||
          b["cdp_port"].get<int64_t>() > 65535) {
        return Bad("browser.cdp_port must be a port (1..65535)");
      }
      c.browser.cdp_port = b["cdp_port"].get<int>();
    }
    if (b.contains("profile_device") && !b["profile_device"].is_null()) {
      if (!b["profile_device"].is_string()) return Bad("browser.profile_device must be a string");
      c.browser.profile_device = b["profile_device"].get<std::string>();
      if (!c.browser.profile_device.empty() && !ValidDevicePath(c.browser.profile_device) &&
          !ValidDiskSerial(c.browser.profile_device)) {
        return Bad("browser.profile_device must be \"\", a /dev/NAME block device or serial:SERIAL");
      }
    }
  }
  if (j.contains("devcontainer")) {
    // SECURITY: the repository's commands, run only in this VM as the named user (a name
    // LookupUser finds in the image's passwd, or the run fails); bounded by the parser.
    ASSIGN_OR_RETURN(c.devcontainer, ParseDevcontainerLifecycle(j["devcontainer"]));
  }
  if (j.contains("forwards")) {
    if (!j["forwards"].is_array()) return Bad("forwards must be an array");
    for (const auto& f : j["forwards"]) {
      if (!f.is_object() || !f.contains("listen") || !f["listen"].is_string() ||
          !f.contains("service") || !f["service"].is_string()) {
        return Bad("each forward needs listen and service");
      }
      c.forwards.push_back({f["listen"].get<std::string>(), f["service"].get<std::string>()});
    }
  } else {
    c.forwards = {{protocol::kGuestProxyListen, protocol::kProxyService},
                  {protocol::kGuestAgentListen, protocol::kSshAgentService}};
  }
  return c;
}

Result<AgentConfig> LoadAgentConfig(const std::string& path) {
  std::ifstream f(path);
  if (!f) return Error(ErrorCode::kNotFound, "cannot read " + path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ParseAgentConfig(ss.str());
}

std::string ShellQuote(const std::string& v) {
  std::string out = "'";
  for (char c : v) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out.push_back(c);
    }
  }
  return out + "'";
}

std::string ProfileScript(const std::map<std::string, std::string>& env) {
  std::string s = "# Written by cloister-agent at every boot from the metadata disk. Do not edit.\n";
  for (const auto& [k, v] : env) s += "export " + k + "=" + ShellQuote(v) + "\n";
  return s;
}

}  // namespace cloister::guest
