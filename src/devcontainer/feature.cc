#include "devcontainer/feature.h"

#include <algorithm>
#include <set>

#include "devcontainer/feature_ref.h"
#include "devcontainer/jsonc.h"
#include "devcontainer/lifecycle.h"

namespace cloister::devcontainer {
namespace {

Error FeatureError(const std::string& source, int line, const std::string& what) {
  return Error(ErrorCode::kInvalidArgument,
               source + (line > 0 ? ":" + std::to_string(line) : std::string()) + ": " + what);
}

// Keys of devcontainer-feature.json that describe the Feature and change nothing in the image.
const std::set<std::string>& InformationalKeys() {
  static const std::set<std::string> k = {"name",     "description", "documentationURL",
                                          "licenseURL", "keywords",  "deprecated", "version"};
  return k;
}

// Keys a container runtime applies and a VM cannot (or cloister does not): reported.
std::string FeatureNotAppliedWhy(const std::string& key) {
  static const std::map<std::string, std::string> k = {
      {"privileged", "not applied: a workspace is a VM, its root is root already"},
      {"init", "not applied: the VM has its own init"},
      {"capAdd", "not applied: a workspace is a VM, not a container"},
      {"securityOpt", "not applied: a workspace is a VM, not a container"},
      {"entrypoint", "not applied: cloister's agent starts the workspace"},
      {"mounts", "not applied: host folders are shared only with `cloister create -v`"},
      {"customizations", "not applied: editor settings"},
      {"postAttachCommand", "not applied: cloister has no attach hook"},
  };
  auto it = k.find(key);
  return it == k.end() ? "not applied: not a devcontainer-feature.json key cloister knows" : it->second;
}

Result<std::string> OptionValue(const nlohmann::json& v, const std::string& where) {
  if (v.is_boolean()) return std::string(v.get<bool>() ? "true" : "false");
  if (!v.is_string()) {
    return Error(ErrorCode::kInvalidArgument,
                 where + ": a " + std::string(v.type_name()) + " where a string or boolean belongs");
  }
  std::string s = v.get<std::string>();
  if (s.size() > kMaxOptionValueBytes || s.find('\0') != std::string::npos) {
    return Error(ErrorCode::kInvalidArgument,
                 where + ": a value longer than " + std::to_string(kMaxOptionValueBytes) +
                     " bytes or with a NUL byte");
  }
  return s;
}

Status ParseOptionSpecs(const nlohmann::json& options, const std::string& source, const LineTable& lines,
                    FeatureMetadata& out) {
  if (!options.is_object()) return FeatureError(source, lines.LineOf({"options"}), "\"options\" is not an object");
  if (options.size() > kMaxOptions) {
    return FeatureError(source, lines.LineOf({"options"}),
               "more than " + std::to_string(kMaxOptions) + " options");
  }
  std::map<std::string, std::string> env_names;
  for (const auto& [id, spec] : options.items()) {
    int line = lines.LineOf({"options", id});
    std::string where = "option \"" + id + "\"";
    if (id.empty()) return FeatureError(source, line, "an option with an empty id");
    if (!spec.is_object()) return FeatureError(source, line, where + " is not an object");
    FeatureOption o;
    o.id = id;
    std::string type = spec.contains("type") && spec["type"].is_string() ? spec["type"].get<std::string>() : "string";
    if (type != "string" && type != "boolean") {
      return FeatureError(source, line, where + ": type \"" + type + "\" (string or boolean)");
    }
    o.boolean = type == "boolean";
    if (spec.contains("default")) {
      auto d = OptionValue(spec["default"], where + " default");
      if (!d.ok()) return FeatureError(source, line, d.error().message());
      o.default_value = *d;
    }
    if (spec.contains("enum")) {
      if (!spec["enum"].is_array()) return FeatureError(source, line, where + ": \"enum\" is not an array");
      for (const auto& e : spec["enum"]) {
        auto v = OptionValue(e, where + " enum");
        if (!v.ok()) return FeatureError(source, line, v.error().message());
        o.allowed.push_back(*v);
      }
    }
    std::string env = OptionEnvName(id);
    if (auto [it, fresh] = env_names.emplace(env, id); !fresh) {
      return FeatureError(source, line,
                 "options \"" + it->second + "\" and \"" + id + "\" are both passed as " + env);
    }
    out.options.push_back(std::move(o));
  }
  return OkStatus();
}

Status ParseDependsOn(const nlohmann::json& deps, const std::string& source, const LineTable& lines,
                      FeatureMetadata& out) {
  if (!deps.is_object()) return FeatureError(source, lines.LineOf({"dependsOn"}), "\"dependsOn\" is not an object");
  if (deps.size() > kMaxDependencies) {
    return FeatureError(source, lines.LineOf({"dependsOn"}),
               "more than " + std::to_string(kMaxDependencies) + " dependencies");
  }
  for (const auto& [ref, opts] : deps.items()) {
    int line = lines.LineOf({"dependsOn", ref});
    auto parsed = ParseFeatureRef(ref);
    if (!parsed.ok()) return FeatureError(source, line, "dependsOn: " + parsed.error().message());
    auto options = ParseFeatureOptions(opts, "dependsOn \"" + ref + "\"");
    if (!options.ok()) return FeatureError(source, line, options.error().message());
    out.depends_on.emplace_back(ref, std::move(*options));
  }
  return OkStatus();
}

Status ParseStringList(const nlohmann::json& v, const std::string& key, const std::string& source,
                       const LineTable& lines, std::vector<std::string>& out) {
  if (!v.is_array() || v.size() > kMaxDependencies) {
    return FeatureError(source, lines.LineOf({key}),
               "\"" + key + "\" is not an array of at most " + std::to_string(kMaxDependencies) +
                   " strings");
  }
  for (const auto& e : v) {
    if (!e.is_string() || e.get<std::string>().empty() ||
        e.get<std::string>().size() > kMaxFeatureRefBytes) {
      return FeatureError(source, lines.LineOf({key}), "\"" + key + "\" holds an element that is not an id");
    }
    out.push_back(NormalizeResource(e.get<std::string>()));
  }
  return OkStatus();
}

}  // namespace

std::string OptionEnvName(std::string_view option_id) {
  // The spec's `str.replace(/[^\w_]/g, '_').replace(/^[\d_]+/g, '_').toUpperCase()`, where JS
  // strings are UTF-16: a character outside the BMP (four UTF-8 bytes) is two code units and so
  // two '_'; any other non-ASCII character is one.
  std::string s;
  for (size_t i = 0; i < option_id.size(); ++i) {
    unsigned char c = static_cast<unsigned char>(option_id[i]);
    if (c < 0x80) {
      bool word = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
      s += word ? static_cast<char>(c >= 'a' && c <= 'z' ? c - 32 : c) : '_';
    } else if ((c & 0xC0) != 0x80) {  // the first byte of a UTF-8 sequence
      s += (c >= 0xF0) ? "__" : "_";
    }
  }
  size_t lead = 0;
  while (lead < s.size() && (s[lead] == '_' || (s[lead] >= '0' && s[lead] <= '9'))) ++lead;
  if (lead > 0) s.replace(0, lead, "_");
  return s;
}

Result<FeatureOptions> ParseFeatureOptions(const nlohmann::json& value, const std::string& where) {
  FeatureOptions out;
  if (value.is_string()) {
    ASSIGN_OR_RETURN(out["version"], OptionValue(value, where));
    return out;
  }
  if (value.is_null()) return out;
  if (!value.is_object()) {
    return Error(ErrorCode::kInvalidArgument,
                 where + ": options are an object (or a version string), not a " +
                     std::string(value.type_name()));
  }
  if (value.size() > kMaxOptions) {
    return Error(ErrorCode::kInvalidArgument,
                 where + ": more than " + std::to_string(kMaxOptions) + " options");
  }
  for (const auto& [id, v] : value.items()) {
    if (id.empty()) return Error(ErrorCode::kInvalidArgument, where + ": an option with an empty id");
    ASSIGN_OR_RETURN(out[id], OptionValue(v, where + " option \"" + id + "\""));
  }
  return out;
}

Result<FeatureMetadata> ParseFeatureMetadata(std::string_view text, const std::string& source) {
  ASSIGN_OR_RETURN(JsoncDocument doc, ParseJsonc(text, source));
  const nlohmann::json& j = doc.value;
  if (!j.is_object()) return FeatureError(source, 1, "not a JSON object");
  FeatureMetadata out;
  for (const auto& [key, v] : j.items()) {
    int line = doc.lines.LineOf({key});
    if (key == "id") {
      if (!v.is_string() || v.get<std::string>().empty()) return FeatureError(source, line, "\"id\" is not a string");
      out.id = v.get<std::string>();
    } else if (key == "version" || key == "name") {
      if (!v.is_string()) return FeatureError(source, line, "\"" + key + "\" is not a string");
      (key == "version" ? out.version : out.name) = v.get<std::string>();
    } else if (key == "options") {
      RETURN_IF_ERROR(ParseOptionSpecs(v, source, doc.lines, out));
    } else if (key == "containerEnv") {
      if (!v.is_object()) return FeatureError(source, line, "\"containerEnv\" is not an object");
      for (const auto& [name, value] : v.items()) {
        if (!value.is_string()) return FeatureError(source, line, "containerEnv \"" + name + "\" is not a string");
        out.container_env[name] = value.get<std::string>();
      }
    } else if (key == "installsAfter") {
      RETURN_IF_ERROR(ParseStringList(v, key, source, doc.lines, out.installs_after));
    } else if (key == "legacyIds") {
      RETURN_IF_ERROR(ParseStringList(v, key, source, doc.lines, out.legacy_ids));
    } else if (key == "dependsOn") {
      RETURN_IF_ERROR(ParseDependsOn(v, source, doc.lines, out));
    } else if (key == "onCreateCommand" || key == "updateContentCommand" ||
               key == "postCreateCommand" || key == "postStartCommand") {
      // Applied by the plan: a Feature's lifecycle commands run before the user's.
      auto c = ParseLifecycleCommand(v, key);
      if (!c.ok()) return FeatureError(source, line, c.error().message());
      if (!c->empty()) out.lifecycle[key] = std::move(*c);
    } else if (!InformationalKeys().count(key)) {
      out.notices.push_back({source, line, key, FeatureNotAppliedWhy(key)});
    }
  }
  if (out.id.empty()) return FeatureError(source, 1, "no \"id\"");
  return out;
}

Result<std::map<std::string, std::string>> FeatureEnvironment(const FeatureMetadata& feature,
                                                              const FeatureOptions& user,
                                                              const FeatureUsers& users) {
  std::map<std::string, std::string> env;
  std::map<std::string, std::string> source_of;  // variable -> option id
  auto put = [&](const std::string& id, const std::string& value) -> Status {
    std::string name = OptionEnvName(id);
    if (name.empty() || name == "_") {
      return Error(ErrorCode::kInvalidArgument,
                   "Feature \"" + feature.id + "\": option \"" + id + "\" has no usable name");
    }
    if (auto [it, fresh] = source_of.emplace(name, id); !fresh && it->second != id) {
      return Error(ErrorCode::kInvalidArgument, "Feature \"" + feature.id + "\": options \"" +
                                                    it->second + "\" and \"" + id +
                                                    "\" are both passed as " + name);
    }
    env[name] = value;
    return OkStatus();
  };
  for (const FeatureOption& o : feature.options) {
    auto given = user.find(o.id);
    std::string value = given == user.end() ? o.default_value : given->second;
    if (given != user.end() && !o.allowed.empty() &&
        std::find(o.allowed.begin(), o.allowed.end(), value) == o.allowed.end()) {
      std::string list;
      for (const auto& a : o.allowed) list += (list.empty() ? "" : ", ") + a;
      return Error(ErrorCode::kInvalidArgument,
                   "Feature \"" + feature.id + "\": option \"" + o.id + "\" is \"" + value +
                       "\", not one of its values",
                   "one of: " + list);
    }
    if (given != user.end() && o.boolean && value != "true" && value != "false") {
      return Error(ErrorCode::kInvalidArgument, "Feature \"" + feature.id + "\": option \"" +
                                                    o.id + "\" is a boolean, not \"" + value + "\"");
    }
    RETURN_IF_ERROR(put(o.id, value));
  }
  for (const auto& [id, value] : user) {
    bool declared = false;
    for (const FeatureOption& o : feature.options) declared |= o.id == id;
    if (!declared) RETURN_IF_ERROR(put(id, value));
  }
  for (const char* builtin : {"_REMOTE_USER", "_REMOTE_USER_HOME", "_CONTAINER_USER",
                              "_CONTAINER_USER_HOME"}) {
    if (env.count(builtin)) {
      return Error(ErrorCode::kInvalidArgument,
                   "Feature \"" + feature.id + "\": an option is passed as " + builtin +
                       ", which the spec reserves");
    }
  }
  env["_REMOTE_USER"] = users.remote_user;
  env["_REMOTE_USER_HOME"] = users.remote_home;
  env["_CONTAINER_USER"] = "root";
  env["_CONTAINER_USER_HOME"] = "/root";
  return env;
}

}  // namespace cloister::devcontainer
