// Test support: a fake npm registry that serves packuments and tarballs from a directory of `npm
// pack` tarballs, as a FakeUpstream handler (tests reach it through the proxy's resolve override
// under a made-up registry name; the product never uses it).
//
// Packuments are synthesised from each tarball's package/package.json: name, dist-tags.latest
// (the highest loaded version without a prerelease part, else any), and versions {v: manifest +
// dist {tarball, integrity sha512-..., shasum}}; tarball URLs are built from the request's Host.
// An optional dependency the directory holds no tarball for (another platform's binary package,
// or an `npm:` alias to another version) gets a packument version marked for no platform (os
// ["cloister-unavailable"]), so npm skips it as platform-incompatible instead of failing the
// install; fetching its tarball is a 404. Anything else is a 404.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/result.h"
#include "proxy/fake_upstream.h"

namespace cloister::proxy::testing {

struct NpmTarball {
  std::string name;     // "@anthropic-ai/claude-code"
  std::string version;  // "2.1.332"
  std::string path;     // the .tgz file
  std::string url_path; // "/@anthropic-ai/claude-code/-/claude-code-2.1.332.tgz"
  std::string integrity;  // "sha512-BASE64"
  std::string shasum;     // sha1 hex
  std::string manifest;   // package.json text
};

// What the real registry does that a plain fake does not, for the install bench and the
// real-client tests: every answer after a random wait, tarballs with a slow first byte, some
// answers with Connection: close (and the connection closed after them), packuments gzipped for a
// client that accepts it. Chunked tarball bodies and keep-alive are the fake's default.
struct RegistryBehaviour {
  int jitter_ms = 0;         // each answer waits a uniform 0..jitter_ms first
  int first_byte_ms = 0;     // tarballs: this pause between the head and the body
  int close_every = 0;       // every Nth answer says Connection: close (0: never)
  bool gzip_packuments = false;
};

class NpmRegistryFake {
 public:
  // Loads every *.tgz of `dir` (reads package/package.json with tar, hashes the file).
  static Result<std::shared_ptr<NpmRegistryFake>> Load(const std::string& dir);

  const std::vector<NpmTarball>& tarballs() const { return tarballs_; }
  // The packument of `name` for a registry reached as `base_url` ("https://registry.npm.test");
  // "" if the registry does not know the name.
  std::string Packument(const std::string& name, const std::string& base_url) const;
  // Serves GET /NAME (scoped names with %2f or '/'), GET tarball paths; 404 otherwise. Tarballs
  // are streamed from disk in chunks.
  Handler handler() const { return handler(RegistryBehaviour{}); }
  Handler handler(RegistryBehaviour behaviour) const;

 private:
  std::vector<NpmTarball> tarballs_;
  // Optional dependencies without a tarball: name -> versions.
  std::map<std::string, std::vector<std::string>> unavailable_;
};

}  // namespace cloister::proxy::testing
