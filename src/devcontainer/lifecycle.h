// A devcontainer.json lifecycle command (onCreateCommand, updateContentCommand,
// postCreateCommand, postStartCommand), in the spec's three forms:
//   "npm ci"                        a string: one command run by /bin/sh -c;
//   ["make", "setup"]               an array: one command run as argv, without a shell;
//   {"deps": "npm ci", "db": [...]}  an object: named commands (each a string or an array) that
//                                   run in parallel; the step fails if any of them fails.
// The same shape travels in the workspace's config and in the guest's metadata (ToJson/FromJson).
//
// SECURITY: the commands are the repository's code: they run only in the guest (guest/
// devcontainer.h), never on the host. Bounded here: kMaxCommands per step, kMaxArgs per argv,
// kMaxCommandBytes of text in all; no NUL byte (it could not travel in an argv).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/result.h"

namespace cloister::devcontainer {

inline constexpr size_t kMaxCommands = 16;
inline constexpr size_t kMaxArgs = 256;
inline constexpr size_t kMaxCommandBytes = 64 * 1024;

struct Command {
  std::string name;               // the object form's key; "" otherwise
  std::string shell;              // the string form: /bin/sh -c SHELL
  std::vector<std::string> argv;  // the array form (non-empty when used)
  bool operator==(const Command&) const = default;
};

struct LifecycleCommand {
  std::vector<Command> commands;  // empty: no command
  bool parallel = false;          // the object form
  bool empty() const { return commands.empty(); }
  bool operator==(const LifecycleCommand&) const = default;
};

// The value of a lifecycle key (`key` names it in errors). null is no command.
Result<LifecycleCommand> ParseLifecycleCommand(const nlohmann::json& value, const std::string& key);

// The stored shape: {"parallel": bool, "commands": [{"name", "shell"} | {"name", "argv"}]};
// FromJson checks the same bounds as the parser.
nlohmann::json LifecycleToJson(const LifecycleCommand& c);
Result<LifecycleCommand> LifecycleFromJson(const nlohmann::json& j, const std::string& key);

// The command as one line for a log or a listing: `sh -c '...'`, the argv quoted, or the named
// commands separated by "; ".
std::string DescribeLifecycle(const LifecycleCommand& c);

}  // namespace cloister::devcontainer
