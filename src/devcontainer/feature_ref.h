// A Feature reference, a key of devcontainer.json's "features" (or of a Feature's "dependsOn"):
//   ./DIR, ../DIR                   a local Feature: a folder with devcontainer-feature.json and
//                                   install.sh, relative to the devcontainer.json's folder, which
//                                   must stay inside the repository (repo.h checks it);
//   REGISTRY/NAMESPACE/NAME[:TAG|@sha256:DIGEST]
//                                   a Feature published to an OCI registry (`:latest` when
//                                   neither is given), e.g. ghcr.io/devcontainers/features/go:1.
// Refused, with what to use instead: `https://` tarballs, absolute paths and the legacy one-word
// ids (`"go"`). References are case-insensitive and normalised to lower case (the spec's rule),
// local paths excepted.
#pragma once

#include <string>
#include <string_view>

#include "base/result.h"

namespace cloister::devcontainer {

inline constexpr size_t kMaxFeatureRefBytes = 512;

struct FeatureRef {
  enum class Kind { kLocal, kOci };
  Kind kind = Kind::kLocal;
  std::string written;  // as in the file
  // kLocal: the relative path as written, without a trailing '/' ("./go", "../shared/go").
  std::string path;
  // kOci (lower case): "ghcr.io", "devcontainers/features/go", and a tag or a digest.
  std::string registry;
  std::string repository;
  std::string tag;     // "latest" when neither a tag nor a digest is given
  std::string digest;  // "sha256:<64 hex>" or ""

  bool local() const { return kind == Kind::kLocal; }
  // What installsAfter and overrideFeatureInstallOrder name a Feature by: REGISTRY/REPOSITORY
  // (no tag or digest) for an OCI Feature, the path as written for a local one.
  std::string Resource() const;
  // The last component: the Feature's id by the spec's folder rule.
  std::string Id() const;
  // REGISTRY/REPOSITORY:TAG or REGISTRY/REPOSITORY@DIGEST (kOci).
  std::string Reference() const;
};

Result<FeatureRef> ParseFeatureRef(std::string_view written);

// A reference without version, as installsAfter and overrideFeatureInstallOrder write it, in the
// form Resource() gives (lower case; a local path as written).
std::string NormalizeResource(std::string_view id);

}  // namespace cloister::devcontainer
