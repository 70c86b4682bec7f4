// `cloister kube render`: a workspace as KubeVirt/CDI manifests (docs/scale-out.md).
//
// Pure: a WorkspaceConfig in, a list of Kubernetes objects out, nothing read or written. The
// objects are a design on paper made executable: a `VirtualMachine` with no network interface
// (its only link is the host-guest channel over vsock), a CDI `DataVolume` cloned from the golden
// PVC of the workspace's signed image (named and annotated by its digest), a blank home
// `DataVolume`, a deny-all `NetworkPolicy` for its pod, and optionally a `VirtualMachineSnapshot`
// (what `checkpoint create` maps to). CheckInvariants states what no rendered manifest may
// contain (host paths, a network path other than the channel, unpinned images, secrets);
// RenderWorkspace runs it on its own output and fails closed.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "base/result.h"
#include "store/config.h"

namespace cloister::kube {

struct RenderOptions {
  std::string namespace_name = "cloister";        // where the workspace's objects live
  std::string image_namespace = "cloister-images";  // where the golden image PVCs live
  std::string storage_class;                      // "" = the cluster's default
  // Digest-pinned container images (REPO@sha256:HEX), both required: the guest agent's
  // container disk and the image's kernel and initramfs for KubeVirt's kernelBoot
  // (docs/scale-out.md says what goes in them).
  std::string agent_image;
  std::string kernel_image;
  std::string snapshot;      // non-empty: also a VirtualMachineSnapshot with this name
};

// The objects, in apply order. Errors: a config that cannot be rendered (no image digest), an
// image reference not pinned by digest, or output that breaks an invariant (never printed).
Result<nlohmann::json> RenderWorkspace(const WorkspaceConfig& config, const RenderOptions& options);

// Every object of `objects` (a JSON array) checked: OK, or kFailedPrecondition listing each
// violation as "KIND/NAME: what".
Status CheckInvariants(const nlohmann::json& objects);

// The golden PVC name of an image: "cloister-image-" + the first 16 hex digits of its digest.
std::string GoldenPvcName(const ImageIdentity& image);

}  // namespace cloister::kube
