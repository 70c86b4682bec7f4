// Test helpers for OCI sources (tests only; target cloister_image_oci_testing): an OCI image
// archive made on the host from a folder, as `oci-archive:PATH` takes it, and a small rootfs to
// make one from.
#pragma once

#include <map>
#include <string>

#include "base/result.h"

namespace cloister::image::oci::testing {

// A rootfs of Debian's static busybox (from the test package cache): /bin/busybox, /bin/sh and
// the other applets as links to it, /etc/passwd and /etc/group with root, /tmp, /root. No init,
// no libc, no tmux, no sshd.
Status MakeBusyboxRootfs(const std::string& cache_dir, const std::string& dir);

// Writes `out` (a tar of an OCI image layout: oci-layout, index.json, blobs/sha256/...) holding one
// amd64 image whose single uncompressed layer is `rootfs` (every entry owned by root, mtime 0,
// sorted: the same folder gives the same bytes), with `env` as its config's Env and `tag` as the
// index's org.opencontainers.image.ref.name. Returns the manifest's digest ("sha256:...").
Result<std::string> WriteOciArchive(const std::string& rootfs, const std::string& out,
                                    const std::map<std::string, std::string>& env = {},
                                    const std::string& tag = "latest");

}  // namespace cloister::image::oci::testing
