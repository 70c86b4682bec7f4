#include "devcontainer/workspace.h"

#include <algorithm>

#include "catalog/sha256.h"
#include "devcontainer/env_check.h"
#include "protocol/contract.h"

namespace cloister::devcontainer {
namespace {

// The guest's PATH when nothing sets one (guest/spawn.h's default).
constexpr char kWsDefaultPath[] = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

bool WsValidUser(const std::string& u) {
  return u.empty() ||
         (u.size() <= 32 && u[0] != '-' &&
          u.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") ==
              std::string::npos);
}

bool WsIsStage(const std::string& s) {
  return std::find(std::begin(kLifecycleKeys), std::end(kLifecycleKeys), s) != std::end(kLifecycleKeys);
}

Result<WorkspaceDevcontainer> SectionFromJson(const nlohmann::json& j) {
  auto bad = [](const std::string& what) {
    return Error(ErrorCode::kCorrupt, "config.json \"devcontainer\": " + what,
                 "recreate the workspace with `cloister create NAME --devcontainer`");
  };
  if (!j.is_object()) return bad("not an object");
  WorkspaceDevcontainer w;
  auto str = [&](const char* key, std::string& out) -> Status {
    if (!j.contains(key)) return OkStatus();
    if (!j[key].is_string()) return bad(std::string(key) + " is not a string");
    out = j[key].get<std::string>();
    return OkStatus();
  };
  RETURN_IF_ERROR(str("source", w.source));
  RETURN_IF_ERROR(str("sha256", w.sha256));
  RETURN_IF_ERROR(str("image", w.image));
  RETURN_IF_ERROR(str("remote_user", w.remote_user));
  if (j.contains("env")) {
    if (!j["env"].is_object() || j["env"].size() > kMaxEnv) return bad("env is not an object");
    for (const auto& [k, v] : j["env"].items()) {
      if (!v.is_string()) return bad("env " + k + " is not a string");
      w.env[k] = v.get<std::string>();
    }
  }
  if (j.contains("steps")) {
    if (!j["steps"].is_array() || j["steps"].size() > kMaxWorkspaceSteps) return bad("steps is not an array");
    for (const auto& s : j["steps"]) {
      if (!s.is_object() || !s.contains("stage") || !s["stage"].is_string() ||
          !s.contains("origin") || !s["origin"].is_string() || !s.contains("command")) {
        return bad("a step needs stage, origin and command");
      }
      WorkspaceStep step;
      step.stage = s["stage"].get<std::string>();
      step.origin = s["origin"].get<std::string>().substr(0, 600);
      auto cmd = LifecycleFromJson(s["command"], step.stage);
      if (!cmd.ok()) return bad(cmd.error().message());
      step.command = std::move(*cmd);
      w.steps.push_back(std::move(step));
    }
  }
  RETURN_IF_ERROR(ValidateWorkspaceDevcontainer(w));
  return w;
}

nlohmann::json SectionToJson(const WorkspaceDevcontainer& w) {
  nlohmann::json steps = nlohmann::json::array();
  for (const WorkspaceStep& s : w.steps) {
    steps.push_back({{"stage", s.stage}, {"origin", s.origin}, {"command", LifecycleToJson(s.command)}});
  }
  return {{"source", w.source}, {"sha256", w.sha256}, {"image", w.image},
          {"env", w.env},       {"remote_user", w.remote_user}, {"steps", steps}};
}

// Docker's ENV expansion of ${NAME} and $NAME from `known` (unknown: empty).
Result<std::string> ExpandFeatureEnv(const std::string& value, const std::map<std::string, std::string>& known,
                           const std::string& where) {
  auto lookup = [&](const std::string& name) {
    auto it = known.find(name);
    if (it != known.end()) return it->second;
    return name == "PATH" ? std::string(kWsDefaultPath) : std::string();
  };
  auto name_char = [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
  };
  std::string out;
  for (size_t i = 0; i < value.size(); ++i) {
    if (value[i] == '\\' && i + 1 < value.size() && value[i + 1] == '$') {
      out += '$';
      ++i;
    } else if (value[i] != '$' || i + 1 >= value.size()) {
      out += value[i];
    } else if (value[i + 1] == '{') {
      size_t end = value.find('}', i + 2);
      std::string name = end == std::string::npos ? "" : value.substr(i + 2, end - i - 2);
      if (name.empty() || !std::all_of(name.begin(), name.end(), name_char)) {
        return Error(ErrorCode::kInvalidArgument,
                     where + ": only ${NAME} and $NAME are expanded in a Feature's containerEnv");
      }
      out += lookup(name);
      i = end;
    } else if (name_char(value[i + 1])) {
      size_t j = i + 1;
      while (j < value.size() && name_char(value[j])) ++j;
      out += lookup(value.substr(i + 1, j - i - 1));
      i = j - 1;
    } else {
      out += value[i];
    }
  }
  return out;
}

}  // namespace

const ConfigSection<WorkspaceDevcontainer>& WorkspaceDevcontainerSection() {
  static const ConfigSection<WorkspaceDevcontainer> s{kWorkspaceKey, SectionFromJson, SectionToJson,
                                                      ValidateWorkspaceDevcontainer};
  return s;
}

Status ValidateWorkspaceDevcontainer(const WorkspaceDevcontainer& w) {
  RETURN_IF_ERROR(CheckContainerEnv(w.env, "the workspace's devcontainer environment"));
  if (!WsValidUser(w.remote_user)) {
    return Error(ErrorCode::kInvalidArgument, "remoteUser \"" + w.remote_user + "\" is not a user name");
  }
  if (w.steps.size() > kMaxWorkspaceSteps) {
    return Error(ErrorCode::kInvalidArgument, "too many lifecycle steps");
  }
  for (const WorkspaceStep& s : w.steps) {
    if (!WsIsStage(s.stage)) return Error(ErrorCode::kInvalidArgument, "unknown lifecycle stage " + s.stage);
    if (s.command.empty()) return Error(ErrorCode::kInvalidArgument, s.stage + ": an empty command");
  }
  return OkStatus();
}

Result<WorkspaceDevcontainer> WorkspaceDevcontainerFromConfig(const WorkspaceConfig& config) {
  return LoadConfigSection(WorkspaceDevcontainerSection(), config);
}

Result<WorkspaceDevcontainer> MakeWorkspaceDevcontainer(const Config& config,
                                                        const std::vector<InstalledFeature>& features,
                                                        const std::string& source,
                                                        const std::string& sha256,
                                                        const std::string& image) {
  WorkspaceDevcontainer w;
  w.source = source;
  w.sha256 = sha256;
  w.image = image;
  w.remote_user = config.remote_user;
  for (const InstalledFeature& f : features) {
    for (const auto& [k, v] : f.metadata->container_env) {
      ASSIGN_OR_RETURN(w.env[k], ExpandFeatureEnv(v, w.env, "Feature " + f.ref + " containerEnv " + k));
    }
  }
  for (const auto& [k, v] : config.container_env) w.env[k] = v;  // devcontainer.json's last
  for (const char* stage : kLifecycleKeys) {
    for (const InstalledFeature& f : features) {
      auto it = f.metadata->lifecycle.find(stage);
      if (it != f.metadata->lifecycle.end()) w.steps.push_back({stage, "Feature " + f.ref, it->second});
    }
    auto it = config.lifecycle.find(stage);
    if (it != config.lifecycle.end()) w.steps.push_back({stage, config.source, it->second});
  }
  RETURN_IF_ERROR(ValidateWorkspaceDevcontainer(w));
  return w;
}

nlohmann::json GuestLifecycleJson(const WorkspaceDevcontainer& w) {
  nlohmann::json create = nlohmann::json::array();
  nlohmann::json start = nlohmann::json::array();
  for (const WorkspaceStep& s : w.steps) {
    nlohmann::json cmds = nlohmann::json::array();
    for (const Command& c : s.command.commands) {
      nlohmann::json cj = {{"name", c.name}};
      if (c.argv.empty()) {
        cj["shell"] = c.shell;
      } else {
        cj["argv"] = c.argv;
      }
      cmds.push_back(std::move(cj));
    }
    nlohmann::json step = {{"name", s.stage}, {"origin", s.origin},
                           {"parallel", s.command.parallel}, {"commands", std::move(cmds)}};
    (s.stage == "postStartCommand" ? start : create).push_back(std::move(step));
  }
  return {{"user", w.remote_user.empty() ? std::string(protocol::kGuestUser) : w.remote_user},
          {"create_id", catalog::Sha256Hex(create.dump())},
          {"create", std::move(create)},
          {"start", std::move(start)}};
}

}  // namespace cloister::devcontainer
