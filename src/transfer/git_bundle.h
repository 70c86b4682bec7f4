// Host side of `cloister git pull`: the header of a git bundle made by a guest's git.
//
// A bundle (gitformat-bundle(5)) is a header, then a packfile:
//   "# v2 git bundle\n" | "# v3 git bundle\n" ("@capability[=value]\n")*   (v3 only)
//   ("-" OID [" " comment] "\n")*                                          prerequisites
//   (OID " " REFNAME "\n")+                                                references
//   "\n"                                                                   end of header
//
// SECURITY: the bundle is the guest's bytes. ParseBundleHeader reads the header with bounds
// (kMaxBundleHeader bytes, kMaxBundleRefs references, kMaxBundleLine per line), accepts only
// hex object ids of the announced format (40 digits for sha1, 64 for sha256), refuses every v3
// capability but object-format (a filter would make a partial bundle), and holds every reference
// name to git's check-ref-format rules (ValidRefName), so a name never reaches a git command line
// or a terminal unchecked. CheckBundleRefs then refuses a bundle holding any reference that was
// not asked for (a guest cannot slip refs/heads/main or refs/tags/x into the host repository).
// The packfile itself is left to host git (`git bundle verify`, then `git fetch` of exactly the
// asked refspecs). Fuzzed by fuzz/git_bundle_fuzz.cc.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"

namespace cloister::transfer {

inline constexpr size_t kMaxBundleHeader = 1 << 20;
inline constexpr size_t kMaxBundleRefs = 1024;
inline constexpr size_t kMaxBundleLine = 4096;

struct BundleRef {
  std::string oid;
  std::string name;  // "refs/heads/main"
};

struct BundleHeader {
  int version = 2;
  std::string object_format = "sha1";
  std::vector<std::string> prerequisites;  // oids the receiving repository must have
  std::vector<BundleRef> refs;
  size_t header_size = 0;  // bytes up to and including the blank line
};

// `bytes` is the start of the bundle (at least its header; more is ignored).
Result<BundleHeader> ParseBundleHeader(std::string_view bytes);

// git check-ref-format's rules for a full reference name: "refs/..." (or "HEAD"), components not
// starting with '.' nor ending with ".lock", no "..", "@{", control characters, space, ~ ^ : ? * [
// or backslash, no "//", no trailing '/' or '.', at most 1024 bytes.
bool ValidRefName(std::string_view name);

// The header's references must be exactly `wanted` (each present once, nothing else).
Status CheckBundleRefs(const BundleHeader& header, const std::vector<std::string>& wanted);

}  // namespace cloister::transfer
