#include "cli/image_resolver.h"

#include <stdlib.h>

#include "base/strings.h"
#include "catalog/catalog.h"
#include "catalog/names.h"
#include "catalog/store.h"
#include "store/image_ref.h"

namespace cloister::cli {

using catalog::CatalogStore;
using catalog::IsValidName;
using catalog::Rehash;
using catalog::Rejected;
using catalog::Rejection;
using catalog::RejectionOf;
using catalog::ResolvedImage;
namespace names = catalog::names;

namespace {

std::string RealPathOr(const std::string& path) {
  char* real = realpath(path.c_str(), nullptr);
  if (!real) return path;
  std::string out = real;
  free(real);
  return out;
}

Result<ImageIdentity> ResolveCatalogName(Env* env, const std::string& store_root,
                                         const std::string& name) {
  if (!IsValidName(name)) {
    return Error(ErrorCode::kInvalidArgument, "\"" + name + "\" is not an image name",
                 "see `cloister image ls` for image names; a raw image file needs a path with "
                 "a '/' (e.g. ./" + name + ")");
  }
  CatalogStore catalogs(store_root);
  Result<ResolvedImage> r = catalogs.Resolve(name, Rehash::kIfChanged);
  if (!r.ok()) {
    std::optional<Rejection> why = RejectionOf(r.error());
    if (why == Rejection::kArtifactMismatch || why == Rejection::kMissingArtifact) {
      return Error(r.error().code(),
                   "refusing to create from image \"" + name + "\": " + r.error().message(),
                   "its files no longer match the signed catalog; remove it (`cloister image rm " +
                       name + "`) and build or import it again");
    }
    return r.error();
  }
  // Same checks as any base image (a regular, raw, non-qcow2 file); the path is the resolved one.
  ASSIGN_OR_RETURN(ImageIdentity id, IdentifyRawImage(env, r->disk_path));
  if (id.size != r->disk_size) {
    return Rejected(Rejection::kArtifactMismatch,
                    name + ": the disk changed size while it was being verified");
  }
  id.name = r->name;
  id.version = r->version;
  id.sha256 = r->sha256;
  id.channel = r->channel;
  id.kernel_path = RealPathOr(r->kernel_path);
  id.initrd_path = RealPathOr(r->initrd_path);
  id.kernel_cmdline = r->kernel_cmdline;
  return id;
}

}  // namespace

Result<ImageIdentity> ResolveImageSpec(Env* env, const std::string& store_root,
                                       const std::string& spec) {
  if (spec.empty()) return ResolveCatalogName(env, store_root, catalog::kDefaultImageName);
  if (spec.find('/') == std::string::npos) return ResolveCatalogName(env, store_root, spec);
  // A path. Inside the store's image directory it is a catalog image's artifact: resolve the
  // image by name, so it cannot dodge the signature checks.
  std::string real = RealPathOr(spec);
  std::string images = RealPathOr(store_root + "/" + names::kImagesDir);
  std::string rest = StartsWith(real, images + "/") ? real.substr(images.size() + 1) : "";
  if (size_t slash = rest.find('/'); slash != std::string::npos) {
    std::string name = rest.substr(0, slash);
    if (rest.substr(slash + 1) != names::kDiskFile) {
      return Error(ErrorCode::kInvalidArgument,
                   spec + " is not an image's disk",
                   "name the image instead: --image " + name);
    }
    return ResolveCatalogName(env, store_root, name);
  }
  return ResolveImage(env, store_root + "/" + names::kImagesDir, spec);
}

std::function<Result<ImageIdentity>(const std::string&)> CatalogImageResolver(
    Env* env, std::string store_root) {
  return [env, root = std::move(store_root)](const std::string& spec) {
    return ResolveImageSpec(env, root, spec);
  };
}

}  // namespace cloister::cli
