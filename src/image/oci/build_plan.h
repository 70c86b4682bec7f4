// What an image build from an OCI source is asked to do (issue 41): one plan, filled by the front
// ends (`cloister image build --from REF`, and the devcontainer.json front end), run by the image
// pipeline (cli/image_from_plan.h, BuildImageFromPlan) inside a throwaway builder VM.
//
// A plan is three parts, in the order the builder VM applies them:
//   1. a source: an OCI image (`docker://NAME[:TAG|@DIGEST]`, `oci-archive:PATH`,
//      `docker-archive:PATH`, `oci:DIR[:REF]`), or a Dockerfile with its context, build args and
//      target (built with buildah in the builder VM; its FROM names may be loaded first from
//      other sources, `Source::base_images`);
//   2. steps: an ordered list of shell commands run as root inside the image's rootfs (a chroot
//      in the builder VM, /proc /sys /dev mounted, the builder's proxied egress), each from a
//      host directory copied in for the step (a devcontainer feature's folder, its install.sh
//      the command, its options the environment) and removed after it;
//   3. cloister's finishing (never the caller's): cloister's static busybox, init and boot hook
//      under /usr/lib/cloister, the contract's user, then the disk (reproducible ext4) and its
//      SHA-256, signed into the local catalog with the plan's provenance.
//
// Who runs what (docs/design.md "Images from OCI sources"): everything in a plan that comes from
// the image or the repo (layers, a Dockerfile's RUN, a step's command) runs only in the builder
// VM, whose egress goes through a cloister proxy holding no credential but the registry login
// named here. The host copies the plan's files in (a tar over the channel), never unpacks a layer
// or runs a step, and hashes the disk the VM wrote. The builder VM and its disks are deleted when
// the build ends, success or failure; a failed build leaves nothing in the store.
//
// For the devcontainer front end (41b): fill a BuildPlan (ParseSourceRef for `image`, a
// DockerfileSource for `build`, one Step per feature in install order with its options in `env`
// and its digest, `devcontainer_sha256`), check it with ValidatePlan, and hand it to
// BuildImageFromPlan. PlanDigest is the key to reuse an image built from the same inputs.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"

namespace cloister::image::oci {

enum class SourceKind {
  kRegistry,       // docker://NAME[:TAG|@DIGEST], pulled through the builder's proxy
  kOciArchive,     // oci-archive:PATH (a tar of an OCI image layout)
  kDockerArchive,  // docker-archive:PATH (`docker save`'s tar)
  kOciDir,         // oci:DIR[:REF] (an OCI image layout directory; REF picks one of its images)
  kDockerfile,     // a Dockerfile built with buildah in the builder VM
};

// "registry", "oci-archive", "docker-archive", "oci", "dockerfile".
const char* SourceKindName(SourceKind kind);

struct Source;

// A Dockerfile build (SourceKind::kDockerfile).
struct DockerfileSource {
  std::string dockerfile;  // host path of the Dockerfile (absolute)
  std::string context;     // host directory sent as the build context (absolute); symlinks in it
                           // are sent as symlinks, never followed on the host
  std::map<std::string, std::string> build_args;  // --build-arg K=V
  std::string target;                             // --target (empty: the last stage)
  // Images a FROM line names that are not in a registry: each is loaded into the builder's image
  // store under `name` (e.g. "localbase:1", written `FROM localbase:1`) before the build; the
  // build never pulls a name given here.
  struct BaseImage {
    std::string name;  // [a-z0-9][a-z0-9._/-]*(:[A-Za-z0-9._-]+)?
    std::string ref;   // an OCI REF (ParseSourceRef's forms, not a Dockerfile)
  };
  std::vector<BaseImage> base_images;
};

struct Source {
  SourceKind kind = SourceKind::kRegistry;
  std::string ref;  // as the user wrote it ("docker://alpine:3.19", "oci-archive:./a.tar")
  // kRegistry: NAME[:TAG|@DIGEST] as skopeo's docker transport takes it (no "docker://");
  // kOciArchive, kDockerArchive: the archive's absolute host path;
  // kOciDir: the layout directory's absolute host path; `oci_ref` the image in it ("" = the only one).
  std::string location;
  std::string oci_ref;
  DockerfileSource dockerfile;  // kDockerfile only
};

// Parses an OCI REF: "docker://NAME[:TAG|@DIGEST]", "oci-archive:PATH", "docker-archive:PATH",
// "oci:DIR[:REF]". Relative paths are made absolute against `cwd`. An unknown transport, an
// empty name, a malformed tag or digest, or a path that is not there is kInvalidArgument with a
// hint listing the forms. Pure but for the existence check of a path.
Result<Source> ParseSourceRef(std::string_view ref, const std::string& cwd);

// One command run as root in the image's rootfs (a chroot inside the builder VM), in plan order.
struct Step {
  std::string name;  // shown in progress and recorded: "feature ./.devcontainer/hello"
  // A host directory copied into the rootfs at /tmp/cloister-step (symlinks copied as symlinks,
  // never followed on the host) for this step only; "" = none. The command runs with it as cwd
  // (or / without one).
  std::string dir;
  // Shell text run with `/bin/sh -e` inside the rootfs (the image must have /bin/sh). A
  // feature's is typically "./install.sh" (or "sh ./install.sh").
  std::string command;
  // The step's environment on top of a fixed one (PATH, HOME=/root, SOURCE_DATE_EPOCH, the
  // proxy CA bundle): a feature's options, upper-cased as the devcontainer spec says.
  std::map<std::string, std::string> env;
  // Recorded in the catalog entry's provenance ("sha256:..." of the feature: its OCI manifest
  // digest, or the SHA-256 of its folder's tar); may be empty.
  std::string digest;
};

// Where an image came from, recorded in its catalog entry (signed) and shown by `image ls`,
// `image describe NAME` and `describe WS`. The pipeline fills what the build learns.
struct Provenance {
  std::string source_ref;           // Source::ref
  std::string manifest_digest;      // the source image's manifest ("sha256:..."); pipeline
  std::string devcontainer_sha256;  // the devcontainer.json's SHA-256 (hex); the front end
  std::vector<std::pair<std::string, std::string>> steps;  // (Step::name, Step::digest)
  std::string kernel;               // cloister's kernel package version; pipeline
  std::string agent;                // cloister's agent version; pipeline
  std::string busybox;              // cloister's busybox package version; pipeline
};

struct BuildPlan {
  std::string name;  // the catalog name of the image built (catalog::IsValidName)
  Source source;
  std::vector<Step> steps;
  std::string devcontainer_sha256;  // copied into the provenance ("" when not from one)
  // The SHA-256 (hex) of the bytes of what the plan names only by path (a Dockerfile, its
  // context, a base archive), from the front end that copied them (devcontainer/build.h), so that
  // PlanDigest changes when they do; "" when the front end hashed nothing.
  std::string inputs_sha256;
  // The registry login, as a credential of a vault (`cloister cred add`): swapped in by the
  // builder's proxy for the registry's host only, never in the builder VM or the image.
  // "" = anonymous pulls.
  std::string registry_workspace;  // the workspace whose secrets file holds it
  std::string registry_credential;
  uint64_t disk_size_bytes = 0;  // the image's disk; 0: the rootfs's size, rounded up, plus room
  bool show_step_output = false;  // each step's (and each Dockerfile RUN's) output on progress
};

// Limits a plan is held to (ValidatePlan).
inline constexpr size_t kMaxSteps = 64;
inline constexpr size_t kMaxEnv = 256;
inline constexpr size_t kMaxCommandBytes = 64 << 10;
inline constexpr uint64_t kMaxDiskBytes = 256ull << 30;

// Checks a plan before any VM starts: a valid name, a source of a known kind whose host paths
// exist, at most kMaxSteps steps with names, commands within kMaxCommandBytes, environment names
// [A-Za-z_][A-Za-z0-9_]* (at most kMaxEnv, no NUL in values), step directories that exist.
Status ValidatePlan(const BuildPlan& plan);

// SHA-256 (hex) of the plan's inputs as given (the source ref, the Dockerfile's path, args and
// target, each step's name, command, environment and digest, the devcontainer's SHA-256, the
// inputs' SHA-256, the disk size), independent of the image name: the same plan twice gives the same digest. A registry
// tag is hashed as written (its manifest may move; the built image's provenance has the digest).
std::string PlanDigest(const BuildPlan& plan);

}  // namespace cloister::image::oci
