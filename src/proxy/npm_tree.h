// Test and bench support: a synthetic npm dependency tree with the shape of a web framework's
// install (a root package with 70+ transitive dependencies several levels deep, some shared, a few
// large tarballs among many small ones), written as `npm pack`-style tarballs that the fake
// registry (npm_fake.h) serves. Deterministic for a given seed, so a directory made once is reused
// (the tarballs cached; a stamp names what the directory holds).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "base/result.h"

namespace cloister::proxy::testing {

struct NpmTreeOptions {
  size_t packages = 75;  // the root's transitive dependencies (the root not counted)
  uint32_t seed = 1;
  std::string scope = "@cloister-tree";
};

struct NpmTree {
  std::string dir;   // holds the tarballs
  std::string root;  // "@cloister-tree/app@1.0.0": what `npm install` is given
  size_t tarballs = 0;
};

// Writes the tree's tarballs into `dir` (made if absent), or reuses it when its stamp says it
// holds this tree already.
Result<NpmTree> WriteNpmTree(const std::string& dir, const NpmTreeOptions& options = {});

}  // namespace cloister::proxy::testing
