// Test helpers for image builds and for other modules' VM tests (tests only).
#pragma once

#include <stdlib.h>

#include <filesystem>
#include <string>

#include "base/result.h"
#include "catalog/entry.h"

namespace cloister::image::testing {

// The Debian package cache shared by tests across runs: $CLOISTER_BINARY_DIR/test-cache/debs
// (ctest sets CLOISTER_BINARY_DIR), else /tmp/cloister-test-cache/debs.
std::string TestCacheDir();

struct SharedImage {
  std::string dir;  // holds disk.raw, vmlinuz, initrd.img
  catalog::ImageEntry entry;
};

// The test image, built once per build tree (under a lock, so parallel tests share one build) in
// $CLOISTER_BINARY_DIR/test-cache/image-test/ and reused by later tests. Read-only for callers:
// boot it with snapshot=on or clone it, never write to it. Rebuilt when the recipe version
// changes. Use this in VM tests of other modules.
Result<SharedImage> SharedTestImage();

// The shared test image with its disk grown to `disk_bytes` (sparse copy, truncate, resize2fs on
// the host: seconds), for tests that install hundreds of MiB in a guest (agent CLIs). Derived once
// per build tree and recipe version into $CLOISTER_BINARY_DIR/test-cache/image-test-<MiB>m/;
// read-only for callers like SharedTestImage().
Result<SharedImage> SharedTestImageWithDisk(uint64_t disk_bytes);

// The browser image (image/builder.h BuildBrowserImage), built once per build tree under a lock in
// $CLOISTER_BINARY_DIR/test-cache/image-browser/ (about a minute from a warm package cache, 1 GiB
// sparse disk), rebuilt when kBrowserRecipeVersion changes. Read-only for callers like
// SharedTestImage(): boot it with snapshot=on or a qcow2 overlay.
Result<SharedImage> SharedBrowserTestImage();

// The builder VM's image (image/builder.h BuildBuilderImage), built once per build tree like the
// browser image (about a minute from a warm package cache, 768 MiB sparse disk). Read-only.
Result<SharedImage> SharedBuilderTestImage();

class TempDir {
 public:
  TempDir() {
    char t[] = "/tmp/cloister-image-XXXXXX";
    path_ = mkdtemp(t);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace cloister::image::testing
