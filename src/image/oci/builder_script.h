// The script the builder VM runs for one BuildPlan (image/oci/build_plan.h), rendered on the host
// from fixed text and the plan's values (each one shell-quoted), and the names it and the host
// agree on. Pure: build_plan_test.cc checks the text.
//
// Inside the builder VM, as root (busybox sh), in order: grow its own root filesystem (the system
// disk is an overlay larger than the builder image), copy the source into an OCI layout with skopeo
// (a registry through the VM's egress, i.e. the host's proxy; an archive or layout the host pushed
// in), check it is for amd64, unpack it with umoci (or build the Dockerfile with buildah, chroot
// isolation, vfs storage, after loading its base images), run each step in a chroot of the rootfs,
// cloister's finishing (finish.h), then mkfs.ext4 -d onto the output disk (vdb) with the image's
// fixed UUID and hash seed and every inode time set to the build epoch (cloister-ext4-times).
// Its output lines for the host start with kOutputPrefix (build_output.h parses them).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "image/oci/build_plan.h"

namespace cloister::image::oci {

// Where the builder works (on its own root filesystem) and where the host's tar pushes land.
inline constexpr char kBuildDir[] = "/var/lib/cloister-build";
inline constexpr char kInputDir[] = "/var/lib/cloister-build/in";
// Names under kInputDir.
inline constexpr char kScriptFile[] = "build.sh";
inline constexpr char kFinishFile[] = "finish.sh";
inline constexpr char kBusyboxFile[] = "busybox";
inline constexpr char kExt4TimesFile[] = "cloister-ext4-times";
inline constexpr char kSourceArchive[] = "source.tar";  // oci-archive / docker-archive
inline constexpr char kSourceLayout[] = "source";       // oci: layout directory
inline constexpr char kDockerfileName[] = "Dockerfile";
inline constexpr char kContextDir[] = "context";
// Step N's script is steps/N.sh and its folder stepdir-N (N from 0); base image N of a Dockerfile
// build is base-N.tar (an archive) or base-N (a layout).
std::string StepScriptName(size_t index);
std::string StepDirName(size_t index);
std::string BaseInputName(size_t index, SourceKind kind);
// The output disk in the builder VM (the home disk's slot).
inline constexpr char kOutputDevice[] = "/dev/vdb";
// Every line meant for the host begins so.
inline constexpr char kOutputPrefix[] = "cloister-build: ";

struct ScriptOptions {
  std::string disk_uuid;       // the output filesystem's UUID (DeterministicUuid of the name)
  std::string disk_hash_seed;  // its htree hash seed
  int64_t epoch = 0;           // every inode and superblock time
};

// 'text' for sh: single quotes, each ' as '\''.
std::string ShellQuote(std::string_view text);

// The whole build script for `plan`.
std::string BuilderScript(const BuildPlan& plan, const ScriptOptions& options);

// The script's shell functions alone (say, die, last, logtail, pullfail, copy), for tests that
// run them on the host: pullfail turns a failed copy's last line ($W/err) into an error kind
// (unreachable, not-found, arch, auth, else pull).
std::string ScriptFunctions();

// Step `step`'s script, run with `/bin/sh -e` in the chroot: its environment exported, cwd its
// folder (/tmp/cloister-step) when it has one, then its command.
std::string StepScript(const Step& step);

}  // namespace cloister::image::oci
