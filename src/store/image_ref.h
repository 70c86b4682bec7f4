// Resolving `--image` to the base image a system disk is cloned from.
//
// Today IMAGE is a path to a raw disk image file. The catalog module will make it also accept a
// catalog name (verified, signed): ResolveImage is the one function to extend, and its result is
// what the workspace's config records (name, version, sha256, path).
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

// Streams a file through SHA-256; lower-case hex.
Result<std::string> Sha256File(const std::string& path);

// kFailedPrecondition if the base image at identity.path no longer matches (size, mtime).
Status CheckBaseUnchanged(Env* env, const ImageIdentity& identity);

}  // namespace cloister
