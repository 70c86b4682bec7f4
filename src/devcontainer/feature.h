// A Feature's metadata (devcontainer-feature.json) and the environment its install.sh runs with.
//
// Options (the spec's "Option Resolution"): every option the Feature declares is passed to
// install.sh as an environment variable, the user's value when devcontainer.json gives one, else
// the option's default; booleans as "true"/"false". A value the user gives for an option the
// Feature does not declare is passed too (as the spec's reference implementation does). The
// variable's name is OptionEnvName(option id): every character outside [A-Za-z0-9_] becomes '_',
// a leading run of digits and underscores becomes one '_', then upper case ("go-version" ->
// GO_VERSION, "2fa" -> _FA). An option with an `enum` takes only one of its values. Two options
// whose names map to one variable are refused. Besides the options: _REMOTE_USER,
// _REMOTE_USER_HOME, _CONTAINER_USER (root) and _CONTAINER_USER_HOME (/root).
//
// SECURITY: devcontainer-feature.json comes from the repository or a registry: parsed as JSONC
// with jsonc.h's bounds, at most kMaxOptions options; install.sh itself runs only in the builder
// VM. Keys cloister does not apply (entrypoint, mounts, privileged, capAdd, ...) are reported.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/result.h"
#include "devcontainer/lifecycle.h"
#include "devcontainer/notice.h"

namespace cloister::devcontainer {

inline constexpr size_t kMaxOptions = 128;
inline constexpr size_t kMaxOptionValueBytes = 4096;
inline constexpr size_t kMaxDependencies = 32;
inline constexpr size_t kMaxFeatures = 64;  // Features of one devcontainer, dependencies included

// The user's options for one Feature: option id -> value ("true"/"false" for booleans). Sorted by
// id (the spec's round sort compares keys, then values, in this order).
using FeatureOptions = std::map<std::string, std::string>;

struct FeatureOption {
  std::string id;
  bool boolean = false;
  std::string default_value;         // "" when absent; "true"/"false" for booleans
  std::vector<std::string> allowed;  // `enum`: the only values taken (empty: free-form)
};

struct FeatureMetadata {
  std::string id;
  std::string version;
  std::string name;
  std::vector<FeatureOption> options;
  std::map<std::string, std::string> container_env;  // ENV for this and later steps, and the image
  std::vector<std::string> installs_after;           // normalised (NormalizeResource)
  std::vector<std::pair<std::string, FeatureOptions>> depends_on;  // reference -> options
  std::vector<std::string> legacy_ids;
  // The Feature's own lifecycle commands ("onCreateCommand", ... -> command): they run before
  // devcontainer.json's, in install order (the spec's merge rule).
  std::map<std::string, LifecycleCommand> lifecycle;
  Notices notices;
};

// `source` names the file in errors and notices.
Result<FeatureMetadata> ParseFeatureMetadata(std::string_view text, const std::string& source);

// A Feature's value in devcontainer.json: an object of string or boolean options, or a string (the
// `version` option's shorthand). `where` names it in errors.
Result<FeatureOptions> ParseFeatureOptions(const nlohmann::json& value, const std::string& where);

std::string OptionEnvName(std::string_view option_id);

// Who the lifecycle commands and the interactive session run as, for _REMOTE_USER and its home.
struct FeatureUsers {
  std::string remote_user;
  std::string remote_home;
};

// install.sh's environment ("NAME" -> value), sorted by name.
Result<std::map<std::string, std::string>> FeatureEnvironment(const FeatureMetadata& feature,
                                                              const FeatureOptions& user,
                                                              const FeatureUsers& users);

}  // namespace cloister::devcontainer
