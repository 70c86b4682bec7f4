// `--devcontainer [PATH]` on `cloister image build` and `cloister create`: a repository's
// devcontainer (devcontainer/build.h) built into a catalog image by the image pipeline
// (cli/image_from_plan.h), or an image already built from the same inputs reused.
//
// Reuse: the local catalog's image of the plan's name whose provenance "plan" is this plan's
// PlanDigest (which covers the devcontainer.json, the Dockerfile, the context, the base archives
// and every Feature's bytes) is used as it is, after the catalog's usual checks. Otherwise the
// copies go to images/.devcontainer-NAME/ (deleted when the build ends, success or failure) and
// the pipeline builds them in its builder VM. An image of the name built from other inputs that a
// workspace stands on is not built over: refused before the build (the pipeline would refuse to
// publish it after), naming the workspaces and --image-name.
//
// What devcontainer.json has that cloister does not apply is printed once, with its line, on
// stderr, before anything is built.
#pragma once

#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "base/result.h"
#include "catalog/entry.h"
#include "devcontainer/build.h"
#include "store/store.h"

namespace cloister::cli {

class Cli;

struct DevcontainerFlags {
  CLI::Option* option = nullptr;   // --devcontainer
  std::string path;                // its value ("" = the current repository's)
  std::vector<std::string> bases;  // --base NAME=REF
  std::string name;                // --image-name, or image build's --name ("" = dc-REPO)
  bool verbose = false;            // each step's output (--show-steps, or image build's --verbose)
  std::string accel = "auto";      // the builder VM's (image build's --accel)
  std::string disk_size;           // the image's disk (image build's --disk-size; "" = default)
  bool Given() const { return option && option->count() > 0; }
};

// Adds --devcontainer [PATH] and --base NAME=REF to `cmd`, and with `naming` (on `create`, whose
// NAME is the workspace's) --image-name NAME and --show-steps; `image build` passes its own
// --name, --verbose, --accel and --disk-size.
void AddDevcontainerFlags(CLI::App* cmd, DevcontainerFlags& flags, bool naming);

struct DevcontainerImage {
  devcontainer::PreparedBuild prepared;
  catalog::ImageEntry entry;
  bool reused = false;
};

// Reads the devcontainer, then reuses or builds its image (progress on stderr).
Result<DevcontainerImage> BuildDevcontainerImage(Cli& cli, const DevcontainerFlags& flags);

// `cloister image build --devcontainer`: BuildDevcontainerImage, then what was built (or reused)
// on stdout, failures through cli.Fail.
void RunImageBuildDevcontainer(Cli& cli, const DevcontainerFlags& flags);

// `create NAME --devcontainer`, before the workspace is made: --image beside it and a name that
// cannot be created are refused (before the build, not after it), the image is built or reused,
// and its forwardPorts are added to `publish`.
Result<DevcontainerImage> DevcontainerForCreate(Cli& cli, const DevcontainerFlags& flags,
                                                const std::string& workspace,
                                                const std::string& image_flag,
                                                std::vector<std::string>& publish);

// Then: the new workspace's "devcontainer" key (devcontainer/workspace.h: checked again as it is
// written); the workspace is removed when that fails.
Status RecordDevcontainer(Store& store, const std::string& workspace, const DevcontainerImage& dc);

// The line `create` prints about it.
std::string DevcontainerSummary(const DevcontainerImage& dc);

// forwardPorts as `-p` specs: 127.0.0.1:PORT:PORT, or 127.0.0.1::PORT (a free host port) for a
// port below 1024, which an unprivileged host user cannot bind.
std::vector<std::string> ForwardPortSpecs(const std::vector<uint16_t>& ports);

}  // namespace cloister::cli
