// Runs an image build plan (image/oci/build_plan.h) into the local catalog: the pipeline behind
// `cloister image build --from REF` and the devcontainer front end.
//
//   1. the plan is checked (ValidatePlan); the builder image is resolved from the catalog (built
//      and signed on first use, `image build --builder`);
//   2. the host makes cloister's boot parts from Debian's packages (image/oci/finish.h: kernel,
//      initramfs, static busybox) into images/.build-NAME/ beside an empty sparse disk.raw;
//   3. the builder VM (supervisor/builder_vm.h) gets the script, the finishing, busybox, the
//      ext4 time tool, the source and each step's folder, runs the script, and writes disk.raw;
//      its output is read by image/oci/build_output.h and printed as progress;
//   4. the host hashes the three artifacts and signs the entry, with its provenance, into the
//      local catalog (kept beside the old one while a workspace uses the old: see PublishBuilt).
// On any failure the build directory is deleted: nothing half-built stays in the store.
#pragma once

#include <functional>
#include <string>

#include "base/result.h"
#include "catalog/entry.h"
#include "catalog/store.h"
#include "image/build_util.h"
#include "image/oci/build_plan.h"
#include "supervisor/builder_vm.h"
#include "vm/accel.h"

namespace cloister::cli {

class Cli;

struct PlanBuildOptions {
  std::string store_root;
  image::ProgressSink progress;        // one line each
  bool verbose = false;                // also the tools' own lines
  vm::AccelMode accel = vm::AccelMode::kAuto;
  uint64_t default_disk_bytes = 8ull << 30;  // when the plan names none
  vm::BuilderCancel* cancel = nullptr;       // optional: interrupts the build (kCancelled)
};

// Builds `plan` and signs it into the local catalog; returns the entry signed.
Result<catalog::ImageEntry> BuildImageFromPlan(Cli& cli, const image::oci::BuildPlan& plan,
                                               const PlanBuildOptions& options);

// Publishes a built image (artifacts in `built_dir`) into the local catalog under the store's
// image-in-use rule: refused while a workspace uses a different image of the same name (the
// build directory is then deleted).
Status PublishBuilt(Cli& cli, catalog::CatalogStore& store, const catalog::ImageEntry& entry,
                    const std::string& built_dir);

// Image name for a ref without --name: the repository's last component, or the archive's or
// layout's base name, lower-cased, other characters as '-'.
std::string DefaultImageName(const image::oci::Source& source);

}  // namespace cloister::cli
