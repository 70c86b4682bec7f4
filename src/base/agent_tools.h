// The coding agents a workspace can run (`cloister create|run --tool NAME`, `cloister config NAME
// --tool NAME`): one table shared by the host (workspace config, CLI, metadata config) and the
// guest agent (first-boot install, the tmux window that runs the agent).
//
// The npm versions are pinned here, in one place, so a workspace and CI install the same bytes.
// Bumping a version: change it here; a guest whose install marker names an older version installs
// the new one at its next boot.
#pragma once

#include <string>
#include <string_view>

#include "base/result.h"

namespace cloister {

struct AgentTool {
  std::string_view name;         // as typed after --tool and stored in config.json ("claude")
  std::string_view package;      // npm package ("" for the shell: nothing to install)
  std::string_view version;      // pinned npm version
  std::string_view command;      // the CLI the package installs ("claude"); "" for the shell
  std::string_view key_env;      // the placeholder variable it reads ("ANTHROPIC_API_KEY")
  std::string_view cred_kind;    // the vault credential kind behind it ("anthropic")
  std::string_view description;  // for --help
};

inline constexpr char kDefaultToolName[] = "shell";

inline constexpr AgentTool kAgentTools[] = {
    {"shell", "", "", "", "", "", "a login shell only (the default)"},
    {"claude", "@anthropic-ai/claude-code", "2.1.332", "claude", "ANTHROPIC_API_KEY", "anthropic",
     "Claude Code"},
    {"codex", "@openai/codex", "0.171.0", "codex", "OPENAI_API_KEY", "openai", "OpenAI Codex CLI"},
};

// nullptr for an unknown name.
inline const AgentTool* FindAgentTool(std::string_view name) {
  for (const AgentTool& t : kAgentTools) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

// "shell, claude, codex"
inline std::string AgentToolNames() {
  std::string out;
  for (const AgentTool& t : kAgentTools) {
    if (!out.empty()) out += ", ";
    out += t.name;
  }
  return out;
}

// The tool named `name`, or kInvalidArgument naming the choices.
inline Result<const AgentTool*> ParseAgentTool(const std::string& name) {
  if (const AgentTool* t = FindAgentTool(name)) return t;
  return Error(ErrorCode::kInvalidArgument, "unknown tool '" + name + "'",
               "use one of: " + AgentToolNames());
}

// "@anthropic-ai/claude-code@2.1.332" ("" for the shell).
inline std::string AgentToolPackageSpec(const AgentTool& tool) {
  if (tool.package.empty()) return "";
  return std::string(tool.package) + "@" + std::string(tool.version);
}

}  // namespace cloister
