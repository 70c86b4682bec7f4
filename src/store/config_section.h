// A module-owned section of a workspace's config.json: one top-level key of
// WorkspaceConfig::extra (store/config.h keeps such keys verbatim) holding one policy value.
//
// The shape every such section shares (issue 14 ask 5): an absent key means T's defaults; a
// present one must parse and validate, else it is an error (callers fail closed: the supervisor
// refuses to boot, the CLI reports it and offers `--reset`); writing validates first. The module
// that owns the key supplies the JSON mapping; this header supplies the rest. Used by the egress
// policy (proxy/policy.h, "egress") and the SSH policy (sshagent/policy.h, "ssh").
#pragma once

#include <nlohmann/json.hpp>

#include "base/result.h"
#include "store/config.h"

namespace cloister {

template <class T>
struct ConfigSection {
  const char* key;                                   // the top-level key in config.json
  Result<T> (*from_json)(const nlohmann::json& doc);  // parses and validates
  nlohmann::json (*to_json)(const T& value);
  Status (*validate)(const T& value);
};

// The section's value in `config`: T{} when the key is absent.
template <class T>
Result<T> LoadConfigSection(const ConfigSection<T>& section, const WorkspaceConfig& config) {
  if (!config.extra.is_object()) return T{};
  auto it = config.extra.find(section.key);
  if (it == config.extra.end()) return T{};
  return section.from_json(*it);
}

// Validates `value` and stores it in config.extra (the caller writes the config).
template <class T>
Status PutConfigSection(const ConfigSection<T>& section, WorkspaceConfig& config, const T& value) {
  RETURN_IF_ERROR(section.validate(value));
  if (!config.extra.is_object()) config.extra = nlohmann::json::object();
  config.extra[section.key] = section.to_json(value);
  return OkStatus();
}

}  // namespace cloister
