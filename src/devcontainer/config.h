// devcontainer.json: what cloister reads of it, and what it reports it does not apply.
//
// Applied (the Dev Container spec's meaning, in a VM):
//   image                    the base: an OCI image reference, built by the image pipeline;
//   build.dockerfile, build.context, build.args, build.target (and the older top-level
//   dockerFile / context)    a Dockerfile built in the builder VM; paths relative to the
//                            devcontainer.json's folder, inside the repository (repo.h);
//   features, overrideFeatureInstallOrder
//                            Features installed in the builder VM (feature.h, feature_order.h);
//   containerEnv             the workspace's environment (env_check.h refuses credentials);
//   remoteUser               who the lifecycle commands run as (default: the workspace's user);
//   forwardPorts             published on 127.0.0.1 at the same port number (numbers, or
//                            "localhost:N"; a port of another container, "db:5432", is refused);
//   onCreateCommand, updateContentCommand, postCreateCommand, postStartCommand
//                            lifecycle.h: run in the workspace (guest/devcontainer.h).
// Exactly one of image and a Dockerfile; dockerComposeFile is refused (no Compose in a VM).
// Every other key (the spec's, such as runArgs, mounts, customizations, initializeCommand, and
// unknown ones) becomes a Notice naming its line: reported once, never dropped silently.
// initializeCommand in particular runs on the host in other tools; cloister never runs it.
//
// SECURITY: the file is the repository's, which an agent may have written. Parsed by jsonc.h
// (bounded; a key twice is refused); every list is bounded below; paths are only recorded here
// and opened beneath the repository by repo.h.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/result.h"
#include "devcontainer/feature.h"
#include "devcontainer/feature_ref.h"
#include "devcontainer/lifecycle.h"
#include "devcontainer/notice.h"

namespace cloister::devcontainer {

inline constexpr size_t kMaxEnv = 256;
inline constexpr size_t kMaxEnvValueBytes = 32 * 1024;
inline constexpr size_t kMaxForwardPorts = 64;
inline constexpr size_t kMaxBuildArgs = 128;

// The lifecycle steps, in the order they run.
inline constexpr const char* kLifecycleKeys[] = {"onCreateCommand", "updateContentCommand",
                                                 "postCreateCommand", "postStartCommand"};

struct BuildSpec {
  std::string dockerfile;  // relative to the devcontainer.json's folder
  std::string context;     // likewise; "." when absent
  std::map<std::string, std::string> args;
  std::string target;
};

struct FeatureRequest {
  FeatureRef ref;
  FeatureOptions options;
  int line = 0;
};

struct Config {
  std::string source;  // the name used in errors ("devcontainer.json")
  std::string name;
  std::string image;               // "" when built from a Dockerfile
  std::optional<BuildSpec> build;  // set when built from a Dockerfile
  std::vector<FeatureRequest> features;  // in file order
  std::vector<std::string> override_feature_install_order;
  std::map<std::string, std::string> container_env;
  std::string remote_user;  // "" = the workspace's user
  std::vector<uint16_t> forward_ports;
  // kLifecycleKeys -> command (absent keys are absent).
  std::map<std::string, LifecycleCommand> lifecycle;
  Notices notices;
};

// `source` names the file in errors and notices.
Result<Config> ParseConfig(std::string_view text, const std::string& source);

}  // namespace cloister::devcontainer
