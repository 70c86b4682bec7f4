// What a workspace made from a devcontainer keeps of it: config.json's "devcontainer" key
// (store/config_section.h), written by `cloister create --devcontainer`, read by the supervisor at
// every boot (supervisor/boot_plan.h) into the guest's metadata.
//
//   {"source": PATH, "sha256": HEX, "image": NAME, "env": {K: V}, "remote_user": NAME,
//    "steps": [{"stage": "postCreateCommand", "origin": "devcontainer.json",
//               "command": <lifecycle.h's stored form>}, ...]}
//
// `env` is containerEnv (with the Features' containerEnv before it); `steps` are the lifecycle
// commands in the order they run: per stage (onCreateCommand, updateContentCommand,
// postCreateCommand, postStartCommand), each Feature's in install order, then devcontainer.json's.
// The published ports (forwardPorts) go to the "ports" key, like `-p` (supervisor/ports.h).
//
// SECURITY: the section is re-checked whenever it is read (ValidateWorkspaceDevcontainer): the
// environment by env_check.h (a credential, the host's environment, cloister's own variables:
// refused, and the boot with it), the commands by lifecycle.h's bounds, the user name. The store
// is the user's, but the check is cheap and keeps a hand-edited config from putting a key into the
// guest.
#pragma once

#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/result.h"
#include "devcontainer/config.h"
#include "devcontainer/lifecycle.h"
#include "store/config.h"
#include "store/config_section.h"

namespace cloister::devcontainer {

inline constexpr char kWorkspaceKey[] = "devcontainer";
inline constexpr size_t kMaxWorkspaceSteps = 4 * (kMaxFeatures + 1);

struct WorkspaceStep {
  std::string stage;   // a kLifecycleKeys entry
  std::string origin;  // "devcontainer.json" or "Feature REF"
  LifecycleCommand command;
  bool operator==(const WorkspaceStep&) const = default;
};

struct WorkspaceDevcontainer {
  std::string source;  // the devcontainer.json's absolute path when the workspace was made
  std::string sha256;  // its SHA-256 then
  std::string image;   // the catalog image built from it
  std::map<std::string, std::string> env;
  std::string remote_user;  // "" = the workspace's user
  std::vector<WorkspaceStep> steps;
  bool operator==(const WorkspaceDevcontainer&) const = default;
};

const ConfigSection<WorkspaceDevcontainer>& WorkspaceDevcontainerSection();
Status ValidateWorkspaceDevcontainer(const WorkspaceDevcontainer& w);
// The section of `config`, or nullopt-like empty (source "") when it has none.
Result<WorkspaceDevcontainer> WorkspaceDevcontainerFromConfig(const WorkspaceConfig& config);

// A Feature's part in the workspace, in install order: its reference and metadata.
struct InstalledFeature {
  std::string ref;  // as written ("./hello", "ghcr.io/x/y:1")
  const FeatureMetadata* metadata = nullptr;
};

// The section for a parsed devcontainer.json and its Features (in install order). The Features'
// containerEnv values are expanded (${NAME} and $NAME of earlier values, PATH from the guest's
// default) and checked like containerEnv.
Result<WorkspaceDevcontainer> MakeWorkspaceDevcontainer(const Config& config,
                                                        const std::vector<InstalledFeature>& features,
                                                        const std::string& source,
                                                        const std::string& sha256,
                                                        const std::string& image);

// The guest's metadata object (guest/devcontainer.h's schema): the user, create_id (the SHA-256
// of the create steps), the create steps and the start steps.
nlohmann::json GuestLifecycleJson(const WorkspaceDevcontainer& w);

}  // namespace cloister::devcontainer
