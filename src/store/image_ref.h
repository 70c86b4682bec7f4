// Resolving `--image` to the base image a system disk is cloned from.
//
// The store itself knows raw image paths only (ResolveImage). Catalog names (verified, signed)
// are resolved by cli/image_resolver.h, which the CLI installs as StoreOptions::resolve_image; both
// produce the ImageIdentity the workspace's config records (name, version, sha256, path...).
#pragma once

#include <string>

#include "base/result.h"
#include "store/config.h"
#include "store/env.h"

namespace cloister {

// `images_dir` holds the SHA-256 cache (layout::kImageHashCacheFile): hashing a base image is a
// one-time cost per (path, size, mtime, inode), so creating a workspace stays O(1) in its size.
// Errors: kNotFound (hint names --image), kInvalidArgument (not a regular file, a qcow2 file).
Result<ImageIdentity> ResolveImage(Env* env, const std::string& images_dir, const std::string& spec);

// The checks every base image passes, whatever named it: `path` resolves (realpath) to a regular
// file whose size is a non-zero multiple of 512 and that is not qcow2. Fills name (file name),
// path (absolute, symlinks resolved), size and mtime_ns; not sha256.
Result<ImageIdentity> IdentifyRawImage(Env* env, const std::string& path);

// Streams a file through SHA-256; lower-case hex.
Result<std::string> Sha256File(const std::string& path);

// kFailedPrecondition if the base image at identity.path no longer matches (size, mtime).
Status CheckBaseUnchanged(Env* env, const ImageIdentity& identity);

}  // namespace cloister
