// One image as listed in a catalog: identity, artifacts and the post-install steps that made it.
//
// The image builder (src/image/) fills an ImageEntry; the catalog (catalog.h) signs a list of them.
// Every field here is covered by the catalog signature.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace cloister::catalog {

// Artifact roles. A bootable image has all three.
inline constexpr char kRoleDisk[] = "disk";      // raw ext4 root filesystem (no partition table)
inline constexpr char kRoleKernel[] = "kernel";  // vmlinuz for direct kernel boot
inline constexpr char kRoleInitrd[] = "initrd";  // initramfs that mounts /dev/vda

struct Artifact {
  std::string role;    // kRoleDisk / kRoleKernel / kRoleInitrd
  std::string file;    // plain file name inside the image directory (no '/')
  uint64_t size = 0;   // bytes
  std::string sha256;  // 64 lower-case hex digits

  bool operator==(const Artifact&) const = default;
};

// A command applied to the root filesystem after bootstrap, run as `sh -c COMMAND sh ROOTDIR`.
// Recorded verbatim (and signed) so anyone can see exactly what was done to the packages.
struct PostInstallStep {
  std::string name;     // short label, e.g. "boot-hook"
  std::string command;  // shell text; "$1" is the root directory being built

  bool operator==(const PostInstallStep&) const = default;
};

struct ImageEntry {
  std::string name;     // "debian-12", "test"
  std::string version;  // recipe version + kernel package version
  std::string arch;     // "amd64"
  std::string kernel_cmdline;  // minimum command line; always includes root=/dev/vda rw console=ttyS0
  std::vector<Artifact> artifacts;
  std::vector<PostInstallStep> post_install;
  // Where the image came from (images built from OCI sources, image/oci/build_plan.h): sorted
  // (key, value) pairs such as ("source", "docker://alpine:3.19"), ("manifest", "sha256:..."),
  // ("kernel", ...), ("agent", ...). Keys [a-z0-9_.]{1,32}, values printable ASCII of at most 512
  // bytes, at most 64 pairs. Empty for the recipes' images (and then absent from the catalog's
  // JSON and its signed bytes, which stay what they were before the field existed).
  std::vector<std::pair<std::string, std::string>> provenance;

  const Artifact* FindArtifact(const std::string& role) const {
    for (const auto& a : artifacts) {
      if (a.role == role) return &a;
    }
    return nullptr;
  }
  bool operator==(const ImageEntry&) const = default;
};

}  // namespace cloister::catalog
