#include "devcontainer/config.h"

#include <algorithm>

#include "base/json_util.h"
#include "devcontainer/env_check.h"
#include "devcontainer/jsonc.h"

namespace cloister::devcontainer {
namespace {

// Keys of the spec cloister reads without acting on them, and why (reported as notices).
const std::map<std::string, std::string>& ConfigNotApplied() {
  static const std::map<std::string, std::string> k = {
      {"customizations", "not applied: editor settings"},
      {"runArgs", "not applied: a workspace is a VM, not a container"},
      {"capAdd", "not applied: a workspace is a VM, not a container"},
      {"securityOpt", "not applied: a workspace is a VM, not a container"},
      {"privileged", "not applied: a workspace is a VM, its root is root already"},
      {"init", "not applied: the VM has its own init"},
      {"mounts", "not applied: share a host folder with `cloister create -v HOSTDIR`"},
      {"workspaceMount", "not applied: share a host folder with `cloister create -v HOSTDIR`"},
      {"workspaceFolder",
       "not applied: the lifecycle commands run in the first shared folder (-v), else the home"},
      {"initializeCommand",
       "not run: other tools run it on the host, and cloister runs no repository code on the host"},
      {"postAttachCommand", "not run: cloister has no attach hook"},
      {"waitFor", "not applied: the lifecycle commands run in the background after READY"},
      {"remoteEnv", "not applied: use containerEnv"},
      {"containerUser",
       "not applied: the workspace's processes run as its user (and Features as root)"},
      {"updateRemoteUserUID", "not applied: the workspace's user is uid 1000"},
      {"userEnvProbe", "not applied"},
      {"portsAttributes", "not applied"},
      {"otherPortsAttributes", "not applied"},
      {"appPort", "not applied: use forwardPorts"},
      {"hostRequirements", "not applied: use `cloister create --cpus/--memory`"},
      {"shutdownAction", "not applied"},
      {"overrideCommand", "not applied"},
      {"secrets",
       "not applied: give credentials with `cloister cred add` (the guest sees placeholders)"},
  };
  return k;
}

Error ConfigError(const std::string& source, int line, const std::string& what,
          const std::string& hint = "") {
  return Error(ErrorCode::kInvalidArgument,
               source + (line > 0 ? ":" + std::to_string(line) : std::string()) + ": " + what,
               hint);
}

Result<std::string> RelativePath(const nlohmann::json& v, const std::string& key) {
  if (!v.is_string() || v.get<std::string>().empty()) {
    return Error(ErrorCode::kInvalidArgument, "\"" + key + "\" is not a path");
  }
  std::string p = v.get<std::string>();
  if (p.size() > 1024 || p.find('\0') != std::string::npos) {
    return Error(ErrorCode::kInvalidArgument, "\"" + key + "\" is not a usable path");
  }
  if (p[0] == '/') {
    return Error(ErrorCode::kInvalidArgument, "\"" + key + "\" is an absolute path",
                 "paths are relative to the devcontainer.json's folder, inside the repository");
  }
  return p;
}

Status ParseBuild(const nlohmann::json& b, const std::string& source, const LineTable& lines,
                  Config& c) {
  int line = lines.LineOf({"build"});
  if (!b.is_object()) return ConfigError(source, line, "\"build\" is not an object");
  BuildSpec spec = c.build.value_or(BuildSpec{});
  for (const auto& [key, v] : b.items()) {
    int kline = lines.LineOf({"build", key});
    if (key == "dockerfile" || key == "dockerFile") {
      auto p = RelativePath(v, "build." + key);
      if (!p.ok()) return ConfigError(source, kline, p.error().message(), p.error().hint());
      spec.dockerfile = *p;
    } else if (key == "context") {
      auto p = RelativePath(v, "build.context");
      if (!p.ok()) return ConfigError(source, kline, p.error().message(), p.error().hint());
      spec.context = *p;
    } else if (key == "target") {
      if (!v.is_string() || v.get<std::string>().size() > 128) {
        return ConfigError(source, kline, "\"build.target\" is not a stage name");
      }
      spec.target = v.get<std::string>();
    } else if (key == "args") {
      if (!v.is_object() || v.size() > kMaxBuildArgs) {
        return ConfigError(source, kline, "\"build.args\" is not an object of at most " +
                                      std::to_string(kMaxBuildArgs) + " strings");
      }
      for (const auto& [name, value] : v.items()) {
        if (!value.is_string() || value.get<std::string>().size() > kMaxEnvValueBytes) {
          return ConfigError(source, lines.LineOf({"build", "args", name}),
                     "build argument \"" + name + "\" is not a string");
        }
        spec.args[name] = value.get<std::string>();
      }
    } else {
      c.notices.push_back({source, kline, "build." + key, "not applied"});
    }
  }
  c.build = std::move(spec);
  return OkStatus();
}

Status ParseFeatures(const nlohmann::json& f, const std::string& source, const LineTable& lines,
                     Config& c) {
  if (!f.is_object()) return ConfigError(source, lines.LineOf({"features"}), "\"features\" is not an object");
  if (f.size() > kMaxFeatures) {
    return ConfigError(source, lines.LineOf({"features"}),
               "more than " + std::to_string(kMaxFeatures) + " Features");
  }
  for (const auto& [ref, options] : f.items()) {
    int line = lines.LineOf({"features", ref});
    auto r = ParseFeatureRef(ref);
    if (!r.ok()) return ConfigError(source, line, r.error().message(), r.error().hint());
    auto o = ParseFeatureOptions(options, "Feature \"" + ref + "\"");
    if (!o.ok()) return ConfigError(source, line, o.error().message());
    c.features.push_back({std::move(*r), std::move(*o), line});
  }
  // nlohmann sorts object keys; the file's order is the order of the lines.
  std::stable_sort(c.features.begin(), c.features.end(),
                   [](const FeatureRequest& a, const FeatureRequest& b) { return a.line < b.line; });
  return OkStatus();
}

Status ParseForwardPorts(const nlohmann::json& p, const std::string& source, const LineTable& lines,
                         Config& c) {
  if (!p.is_array() || p.size() > kMaxForwardPorts) {
    return ConfigError(source, lines.LineOf({"forwardPorts"}),
               "\"forwardPorts\" is not an array of at most " + std::to_string(kMaxForwardPorts) +
                   " ports");
  }
  for (size_t i = 0; i < p.size(); ++i) {
    int line = lines.LineOf({"forwardPorts", std::to_string(i)});
    const auto& v = p[i];
    long port = -1;
    if (v.is_number_integer()) {
      port = JsonIntOf<long>(v).value_or(-1);
    } else if (v.is_string()) {
      std::string s = v.get<std::string>();
      size_t colon = s.rfind(':');
      std::string host = colon == std::string::npos ? "" : s.substr(0, colon);
      std::string num = colon == std::string::npos ? s : s.substr(colon + 1);
      if (num.empty() || num.size() > 5 || num.find_first_not_of("0123456789") != std::string::npos) {
        return ConfigError(source, line, "forwardPorts[" + std::to_string(i) + "] is not a port");
      }
      if (!host.empty() && host != "localhost" && host != "127.0.0.1") {
        return ConfigError(source, line,
                   "forwardPorts[" + std::to_string(i) + "] \"" + s.substr(0, 80) +
                       "\" is a port of another container",
                   "a workspace is one VM: forward its own ports (a number)");
      }
      port = std::stol(num);
    }
    if (port < 1 || port > 65535) {
      return ConfigError(source, line, "forwardPorts[" + std::to_string(i) + "] is not a port (1-65535)");
    }
    auto u = static_cast<uint16_t>(port);
    if (std::find(c.forward_ports.begin(), c.forward_ports.end(), u) == c.forward_ports.end()) {
      c.forward_ports.push_back(u);
    }
  }
  return OkStatus();
}

bool ValidUserName(const std::string& u) {
  if (u.empty() || u.size() > 32 || u[0] == '-') return false;
  return u.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") ==
         std::string::npos;
}

// One top-level key; false when it is not one ParseConfig applies.
Result<bool> ApplyKey(const std::string& key, const nlohmann::json& v, const LineTable& lines,
                      Config& c) {
  const std::string& source = c.source;
  int line = lines.LineOf({key});
  if (key == "image") {
    if (!v.is_string() || v.get<std::string>().empty() || v.get<std::string>().size() > 512) {
      return ConfigError(source, line, "\"image\" is not an image reference");
    }
    c.image = v.get<std::string>();
  } else if (key == "build") {
    RETURN_IF_ERROR(ParseBuild(v, source, lines, c));
  } else if (key == "dockerFile" || key == "context") {  // the older top-level spellings
    auto p = RelativePath(v, key);
    if (!p.ok()) return ConfigError(source, line, p.error().message(), p.error().hint());
    if (!c.build) c.build = BuildSpec{};
    (key == "context" ? c.build->context : c.build->dockerfile) = *p;
  } else if (key == "features") {
    RETURN_IF_ERROR(ParseFeatures(v, source, lines, c));
  } else if (key == "overrideFeatureInstallOrder") {
    if (!v.is_array() || v.size() > kMaxFeatures) {
      return ConfigError(source, line, "\"overrideFeatureInstallOrder\" is not an array of Feature ids");
    }
    for (const auto& e : v) {
      if (!e.is_string() || e.get<std::string>().empty() ||
          e.get<std::string>().size() > kMaxFeatureRefBytes) {
        return ConfigError(source, line, "\"overrideFeatureInstallOrder\" holds something not an id");
      }
      c.override_feature_install_order.push_back(e.get<std::string>());
    }
  } else if (key == "containerEnv") {
    if (!v.is_object() || v.size() > kMaxEnv) {
      return ConfigError(source, line, "\"containerEnv\" is not an object of at most " +
                                   std::to_string(kMaxEnv) + " strings");
    }
    for (const auto& [name, value] : v.items()) {
      if (!value.is_string() || value.get<std::string>().size() > kMaxEnvValueBytes) {
        return ConfigError(source, lines.LineOf({key, name}), "containerEnv \"" + name + "\" is not a string");
      }
      c.container_env[name] = value.get<std::string>();
    }
    for (const auto& [name, value] : c.container_env) {
      std::map<std::string, std::string> one = {{name, value}};
      if (Status st = CheckContainerEnv(one, "containerEnv"); !st.ok()) {
        return Error(st.error().code(),
                     source + ":" + std::to_string(lines.LineOf({key, name})) + ": " +
                         st.error().message(),
                     st.error().hint());
      }
    }
  } else if (key == "remoteUser") {
    if (!v.is_string() || !ValidUserName(v.get<std::string>())) {
      return ConfigError(source, line, "\"remoteUser\" is not a user name");
    }
    c.remote_user = v.get<std::string>();
  } else if (key == "forwardPorts") {
    RETURN_IF_ERROR(ParseForwardPorts(v, source, lines, c));
  } else if (std::find(std::begin(kLifecycleKeys), std::end(kLifecycleKeys), key) !=
             std::end(kLifecycleKeys)) {
    auto cmd = ParseLifecycleCommand(v, key);
    if (!cmd.ok()) return ConfigError(source, line, cmd.error().message(), cmd.error().hint());
    if (!cmd->empty()) c.lifecycle[key] = std::move(*cmd);
  } else if (key == "name") {
    if (v.is_string()) c.name = v.get<std::string>().substr(0, 256);
  } else if (key == "$schema") {
    // the editor's schema: nothing to apply
  } else if (key == "dockerComposeFile" || key == "service" || key == "runServices") {
    return ConfigError(source, line, "Docker Compose configurations are not supported",
               "a workspace is one VM: use \"image\" or \"build.dockerfile\"");
  } else {
    return false;
  }
  return true;
}

}  // namespace

Result<Config> ParseConfig(std::string_view text, const std::string& source) {
  ASSIGN_OR_RETURN(JsoncDocument doc, ParseJsonc(text, source));
  if (!doc.value.is_object()) return ConfigError(source, 1, "not a JSON object");
  Config c;
  c.source = source;
  for (const auto& [key, v] : doc.value.items()) {
    ASSIGN_OR_RETURN(bool applied, ApplyKey(key, v, doc.lines, c));
    if (applied) continue;
    auto why = ConfigNotApplied().find(key);
    c.notices.push_back({source, doc.lines.LineOf({key}), key,
                         why != ConfigNotApplied().end() ? why->second
                                                   : "not applied: not a devcontainer.json key"});
  }
  std::stable_sort(c.notices.begin(), c.notices.end(),
                   [](const Notice& a, const Notice& b) { return a.line < b.line; });
  if (c.build && c.build->dockerfile.empty()) {
    return ConfigError(source, doc.lines.LineOf({"build"}), "\"build\" has no \"dockerfile\"");
  }
  if (c.build && c.build->context.empty()) c.build->context = ".";
  if (c.image.empty() == !c.build.has_value()) {
    return ConfigError(source, 1,
               c.image.empty() ? "neither \"image\" nor \"build.dockerfile\""
                               : "both \"image\" and \"build.dockerfile\"",
               "name the base with \"image\" (an OCI reference) or \"build\": {\"dockerfile\": ...}");
  }
  return c;
}

}  // namespace cloister::devcontainer
