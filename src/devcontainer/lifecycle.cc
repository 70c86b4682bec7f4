#include "devcontainer/lifecycle.h"

namespace cloister::devcontainer {
namespace {

Error LifecycleError(const std::string& key, const std::string& what) {
  return Error(ErrorCode::kInvalidArgument, "\"" + key + "\": " + what,
               "a lifecycle command is a string (run by /bin/sh -c), an array of strings (run "
               "without a shell) or an object of named strings or arrays (run in parallel)");
}

bool LifecycleHasNul(const std::string& s) { return s.find('\0') != std::string::npos; }

// One string or array command; `bytes` counts the text of the whole step.
Result<Command> LifecycleOne(const nlohmann::json& v, const std::string& key, const std::string& name,
                           size_t* bytes) {
  Command c;
  c.name = name;
  if (v.is_string()) {
    c.shell = v.get<std::string>();
    if (c.shell.empty()) return LifecycleError(key, "an empty command");
    if (LifecycleHasNul(c.shell)) return LifecycleError(key, "a NUL byte in the command");
    *bytes += c.shell.size();
  } else if (v.is_array()) {
    if (v.empty()) return LifecycleError(key, "an empty array");
    if (v.size() > kMaxArgs) return LifecycleError(key, "more than " + std::to_string(kMaxArgs) + " arguments");
    for (const auto& a : v) {
      if (!a.is_string()) return LifecycleError(key, "an array element that is not a string");
      std::string s = a.get<std::string>();
      if (LifecycleHasNul(s)) return LifecycleError(key, "a NUL byte in an argument");
      *bytes += s.size() + 1;
      c.argv.push_back(std::move(s));
    }
    if (c.argv[0].empty()) return LifecycleError(key, "an empty program name");
  } else {
    return LifecycleError(key, std::string("a ") + v.type_name() + " where a command belongs");
  }
  if (*bytes > kMaxCommandBytes) {
    return LifecycleError(key, "more than " + std::to_string(kMaxCommandBytes) + " bytes of commands");
  }
  return c;
}

std::string LifecycleQuote(const std::string& s) {
  if (!s.empty() && s.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                        "0123456789@%+=:,./-_") == std::string::npos) {
    return s;
  }
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

}  // namespace

Result<LifecycleCommand> ParseLifecycleCommand(const nlohmann::json& value, const std::string& key) {
  LifecycleCommand out;
  size_t bytes = 0;
  if (value.is_null()) return out;
  if (value.is_object()) {
    if (value.size() > kMaxCommands) {
      return LifecycleError(key, "more than " + std::to_string(kMaxCommands) + " parallel commands");
    }
    out.parallel = true;
    for (const auto& [name, v] : value.items()) {
      if (name.empty() || LifecycleHasNul(name)) return LifecycleError(key, "a command with an empty name");
      ASSIGN_OR_RETURN(Command c, LifecycleOne(v, key + "." + name, name, &bytes));
      out.commands.push_back(std::move(c));
    }
    return out;
  }
  ASSIGN_OR_RETURN(Command c, LifecycleOne(value, key, "", &bytes));
  out.commands.push_back(std::move(c));
  return out;
}

nlohmann::json LifecycleToJson(const LifecycleCommand& c) {
  nlohmann::json cmds = nlohmann::json::array();
  for (const Command& one : c.commands) {
    nlohmann::json j = {{"name", one.name}};
    if (one.argv.empty()) {
      j["shell"] = one.shell;
    } else {
      j["argv"] = one.argv;
    }
    cmds.push_back(std::move(j));
  }
  return {{"parallel", c.parallel}, {"commands", std::move(cmds)}};
}

Result<LifecycleCommand> LifecycleFromJson(const nlohmann::json& j, const std::string& key) {
  if (j.is_null()) return LifecycleCommand{};
  if (!j.is_object() || !j.contains("commands") || !j["commands"].is_array()) {
    return LifecycleError(key, "not a stored lifecycle command");
  }
  const auto& cmds = j["commands"];
  bool parallel = j.contains("parallel") && j["parallel"].is_boolean() && j["parallel"].get<bool>();
  if (cmds.size() > kMaxCommands || (!parallel && cmds.size() > 1)) {
    return LifecycleError(key, "too many commands");
  }
  LifecycleCommand out;
  out.parallel = parallel;
  size_t bytes = 0;
  for (const auto& one : cmds) {
    if (!one.is_object()) return LifecycleError(key, "not a stored command");
    std::string name = one.contains("name") && one["name"].is_string() ? one["name"].get<std::string>() : "";
    if (parallel && name.empty()) return LifecycleError(key, "a parallel command without a name");
    if (one.contains("argv")) {
      ASSIGN_OR_RETURN(Command c, LifecycleOne(one["argv"], key, name, &bytes));
      out.commands.push_back(std::move(c));
    } else if (one.contains("shell")) {
      ASSIGN_OR_RETURN(Command c, LifecycleOne(one["shell"], key, name, &bytes));
      out.commands.push_back(std::move(c));
    } else {
      return LifecycleError(key, "a stored command with neither shell nor argv");
    }
  }
  return out;
}

std::string DescribeLifecycle(const LifecycleCommand& c) {
  std::string out;
  for (const Command& one : c.commands) {
    if (!out.empty()) out += "; ";
    if (!one.name.empty()) out += one.name + ": ";
    if (one.argv.empty()) {
      out += "sh -c " + LifecycleQuote(one.shell);
    } else {
      std::string argv;
      for (const auto& a : one.argv) argv += (argv.empty() ? "" : " ") + LifecycleQuote(a);
      out += argv;
    }
  }
  return out;
}

}  // namespace cloister::devcontainer
