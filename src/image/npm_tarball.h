// npm tarballs the images carry (npm itself in the test image) and the host cache they come from.
// An image build fetches a pinned tarball into the cache on first use (`npm pack`, npm's own
// default registry and settings) and uses a cached one after that; either way the bytes are
// checked against the pinned integrity (npm's SRI form, "sha512-<base64>") before anything uses
// them. scripts/install-deps.sh (level `test`) fills the same cache for the tests ahead of time.
#pragma once

#include <functional>
#include <string>
#include <string_view>

#include "base/result.h"

namespace cloister::image {

struct NpmTarball {
  std::string_view name;       // package name, e.g. "npm" or "@openai/codex"
  std::string_view version;    // exact version
  std::string_view file;       // what `npm pack` names it in the cache
  std::string_view integrity;  // "sha512-..." as the registry publishes it
};

// npm 10 (supports Debian 12's Node 18.20), unpacked into the test image's /usr/local.
// Keep in step with scripts/install-deps.sh (npm_pins); a unit test checks both agree.
inline constexpr NpmTarball kTestImageNpm{
    "npm", "10.9.9", "npm-10.9.9.tgz",
    "sha512-1g+6jLQvaIuB4zwvHL7yrXuXcWZwDsCtBX8bbWDqbvJSSr9nPiDDWTHNgwXR27iIcTTW7v3A57hDW9RYv2W4Yg=="};

// npm 9.2.0, the npm Debian 12 ships (its HTTPS proxy agent is https-proxy-agent 5, which waits
// forever when a proxy ends a connection before answering CONNECT): the client the proxy's
// real-install tests and bench (bench/install_bench) run, with the guest's or host's node.
// Keep in step with scripts/install-deps.sh (npm_pins).
inline constexpr NpmTarball kDebianNpm{
    "npm", "9.2.0", "npm-9.2.0.tgz",
    "sha512-oypVdaWGHDuV79RXLvp+B9gh6gDyAmoHKrQ0/JBYTWWx5D8/+AAxFdZC84fSIiyDdyW4qfrSyYGKhekxDOaMXQ=="};

// The npm tarball cache: $CLOISTER_NPM_CACHE, else $XDG_CACHE_HOME/cloister/npm, else
// $HOME/.cache/cloister/npm (the same rule as scripts/install-deps.sh).
std::string NpmCacheDir();

// "sha512-<base64>" of a file's bytes.
Result<std::string> NpmIntegrityOfFile(const std::string& path);

// Path of `t` in the cache after checking its integrity. Missing: kNotFound with the hint to run
// install-deps; a different digest: kCorrupt (never used).
Result<std::string> VerifiedNpmTarball(const NpmTarball& t, const std::string& cache_dir);

// Path of `t` in the cache, fetched on first use. When the cache holds no such file, `npm pack`
// fetches it into a temporary directory inside the cache, its integrity is checked against the
// pin, and only a tarball that matches is renamed into place; `progress` (may be empty) gets a
// line before the fetch and one after. npm missing: kUnavailable naming what to install; npm
// failing: its error; a different digest, fetched or cached: kCorrupt, and nothing fetched is
// kept.
Result<std::string> EnsureNpmTarball(const NpmTarball& t, const std::string& cache_dir,
                                     const std::function<void(const std::string&)>& progress);

// Unpacks a verified tarball's `package/` directory to `dest` (which must not exist yet).
Status UnpackNpmTarball(const std::string& tarball, const std::string& dest);

}  // namespace cloister::image
