// Which Features are installed, and in what order: the spec's "Dependency installation order
// algorithm" (devcontainer-features.md, "Installation order").
//
// ResolveFeatureGraph: the user's Features, then the `dependsOn` dependencies of each, recursively
// (with their options). Two Features are one when they are equal by the spec: OCI Features with
// the same manifest digest and the same options; a local Feature is equal to no other. A
// dependency may not be a local Feature (its folder would be relative to nothing).
//
// InstallOrder: rounds. Each round takes every Feature whose `dependsOn` dependencies and whose
// `installsAfter` entries that name a Feature of the set are all installed already; of those it
// commits the ones with the highest roundPriority (overrideFeatureInstallOrder gives the i-th of
// its n entries n - i, everything else 0) and returns the rest to the next round. Within a round,
// the spec's stable sort: by resource name; then tag, oldest first (`latest` newest); then more
// user options first; then option names, then option values; then the canonical name (the digest).
// A round that can take nothing is a cycle: an error naming the Features left. An
// overrideFeatureInstallOrder entry that names no Feature of the set is an error too.
//
// SECURITY: the graph is bounded (kMaxFeatures nodes); metadata comes from the resolver, which
// parses it with feature.h's bounds.
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "base/result.h"
#include "devcontainer/feature.h"
#include "devcontainer/feature_ref.h"

namespace cloister::devcontainer {

struct ResolvedFeature {
  FeatureMetadata metadata;
  // Equality: an OCI Feature's manifest digest ("sha256:..."); a local Feature's "./path".
  std::string canonical;
  // Provenance: the manifest digest, or the SHA-256 of a local Feature's files (repo.h).
  std::string digest;
};

// Reads a Feature's metadata (a local folder, or an OCI artifact fetched as bytes).
using FeatureResolver = std::function<Result<ResolvedFeature>(const FeatureRef&)>;

struct FeatureNode {
  FeatureRef ref;
  FeatureOptions options;
  ResolvedFeature resolved;
  std::vector<size_t> depends_on;  // indices of the nodes it needs
  bool from_user = false;          // in devcontainer.json's "features" (else a dependency)
};

Result<std::vector<FeatureNode>> ResolveFeatureGraph(
    const std::vector<std::pair<FeatureRef, FeatureOptions>>& user, const FeatureResolver& resolve);

// Indices into `nodes`, in install order.
Result<std::vector<size_t>> InstallOrder(const std::vector<FeatureNode>& nodes,
                                         const std::vector<std::string>& override_order);

}  // namespace cloister::devcontainer
