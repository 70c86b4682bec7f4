// Store-relative names used by the catalog and image modules.
//
// Until src/store/layout.h (owned by the store module) lands on main, these are the one place the
// image/catalog file names are defined; they then become aliases of the layout.h constants.
// docs/layout.md documents each one (what writes it, what deletes it).
#pragma once

namespace cloister::catalog::names {

// <store>/images/: one directory per image, <store>/images/<name>/.
inline constexpr char kImagesDir[] = "images";
// <store>/keys/: the keyring and the local publisher key.
inline constexpr char kKeysDir[] = "keys";
// <store>/cache/debs/: Debian packages downloaded for image builds (reused by later builds).
inline constexpr char kDebCacheDir[] = "cache/debs";

// Inside an image directory: the artifacts, named the same in every image and catalog.
inline constexpr char kDiskFile[] = "disk.raw";
inline constexpr char kKernelFile[] = "vmlinuz";
inline constexpr char kInitrdFile[] = "initrd.img";

}  // namespace cloister::catalog::names
