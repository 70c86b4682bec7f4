// `cloister create --image SPEC`: from what the user typed to the ImageIdentity a workspace
// records and clones from. The catalog's extension of store/image_ref.h's ResolveImage, installed
// by the CLI (OpenStore, cli/store_verbs.h) as StoreOptions::resolve_image so that Store::Create
// calls it under the store lock. It lives in the CLI because it joins two modules: the catalog
// sits below the store and does not know it, and the store only sees a callback.
//
//   ""                 the default image, kDefaultImageName;
//   a name ([a-z0-9._-], no '/')
//                      an image of a verified catalog (CatalogStore::Resolve with
//                      Rehash::kIfChanged: signature, keyring, channel and rollback checks, and the
//                      disk's bytes proven to be the signed ones — re-hashed whenever the file
//                      changed since they were last hashed). Never a file in the working directory;
//   a path with a '/'  a raw image file (ResolveImage: hashed once, cached), recorded without a
//                      version or channel; except <store>/images/<name>/disk.raw, which is
//                      resolved as the catalog image <name> (so it gets the same checks; other
//                      files in an image's directory are refused).
// There is no flag or variable that skips any of this.
#pragma once

#include <functional>
#include <string>

#include "base/result.h"
#include "catalog/catalog.h"
#include "store/config.h"
#include "store/env.h"

namespace cloister::cli {

Result<ImageIdentity> ResolveImageSpec(Env* env, const std::string& store_root,
                                       const std::string& spec);

// ResolveImageSpec bound to a store, for StoreOptions::resolve_image.
std::function<Result<ImageIdentity>(const std::string&)> CatalogImageResolver(
    Env* env, std::string store_root);

}  // namespace cloister::cli
