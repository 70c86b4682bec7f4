// From a repository's devcontainer to what cloister builds and keeps: the image pipeline's plan
// (image/oci/build_plan.h) and the workspace's settings (workspace.h). The front end of
// `cloister image build --devcontainer` and `cloister create --devcontainer`.
//
// PrepareBuild reads the devcontainer.json (repo.h finds it and opens everything beneath the
// repository's root), then:
//   - the source: "image" becomes the registry source docker://IMAGE; "build" copies the
//     Dockerfile and the whole context folder into `staging` through directory fds (symlinks
//     copied as symlinks, nothing followed on the host, bounded: kMaxContextBytes,
//     kMaxContextEntries) and makes a Dockerfile source of the copies, with the build args, the
//     target and the base images the caller names (`--base NAME=REF`: a FROM NAME loaded from an
//     OCI archive or layout instead of a registry);
//   - the Features: resolved (local folders here; OCI Features through the caller's resolver),
//     ordered by feature_order.h, each copied into `staging` and made one step: `chmod +x
//     ./install.sh && ./install.sh` in its folder, as root, with its options' environment
//     (feature.h) and the containerEnv of the Features before it and its own; its digest
//     (the folder's SHA-256) recorded;
//   - the workspace's settings: containerEnv (with the Features'), remoteUser, the lifecycle
//     commands, forwardPorts.
// The plan's inputs_sha256 covers what it names only by path (the devcontainer.json's, the
// Dockerfile's and the context's bytes, the base archives' bytes), so its PlanDigest (the catalog
// entry's provenance "plan") changes with any of them: the same inputs give the same digest, and
// an image built from them is reused.
//
// SECURITY: nothing of the repository runs here; its files are read and copied through repo.h
// only; the Dockerfile's RUN lines and the Features' install.sh run in the builder VM (the image
// pipeline). Every path the config names stays inside the repository (repo.h, DC3).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/result.h"
#include "devcontainer/config.h"
#include "devcontainer/feature_order.h"
#include "devcontainer/notice.h"
#include "devcontainer/repo.h"
#include "devcontainer/workspace.h"
#include "image/oci/build_plan.h"

namespace cloister::devcontainer {

inline constexpr uint64_t kMaxContextBytes = 2ull << 30;
inline constexpr uint64_t kMaxContextEntries = 200000;
inline constexpr size_t kMaxDockerfileBytes = 1 << 20;

struct BuildRequest {
  std::string spec;  // --devcontainer PATH ("" = the current repository's)
  std::string cwd;
  // A directory that does not exist yet: made here, holding the copies the plan names (the
  // caller deletes it once the build is over). Its path is part of the plan: keep it the same
  // for the same image name so that the same inputs give the same digest.
  std::string staging;
  std::vector<image::oci::DockerfileSource::BaseImage> base_images;  // --base NAME=REF
  std::string image_name;  // "" = DefaultImageName
  FeatureResolver oci_features;  // null: an OCI Feature is refused with what to do instead
};

struct PreparedBuild {
  DevcontainerLocation location;
  Config config;
  std::string sha256;  // the devcontainer.json's
  image::oci::BuildPlan plan;
  std::string inputs_digest;  // PlanDigest(plan)
  WorkspaceDevcontainer workspace;
  Notices notices;  // devcontainer.json's, then each Feature's
};

// The devcontainer found for `spec` and parsed (no copy, no build): for a name and a digest.
Result<PreparedBuild> ReadDevcontainer(const std::string& spec, const std::string& cwd);

Result<PreparedBuild> PrepareBuild(const BuildRequest& request);

// "dc-" and the repository folder's name (lower case, [a-z0-9._-]), and the devcontainer's
// folder under .devcontainer/ when it is not the default one: "dc-myproj", "dc-myproj-python".
std::string DefaultImageName(const DevcontainerLocation& location);

// --base NAME=REF.
Result<image::oci::DockerfileSource::BaseImage> ParseBaseFlag(const std::string& flag,
                                                              const std::string& cwd);

}  // namespace cloister::devcontainer
