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
// <store>/catalogs/<channel>/: the adopted (verified) catalog of each channel.
inline constexpr char kCatalogsDir[] = "catalogs";
inline constexpr char kCatalogFile[] = "catalog.json";
inline constexpr char kSignatureFile[] = "catalog.json.sig";
// <store>/keys/keyring.json: trusted publisher keys; keys/publisher.key: this host's signing key.
inline constexpr char kKeyringFile[] = "keyring.json";
inline constexpr char kPublisherKeyFile[] = "publisher.key";
inline constexpr char kPublisherPubFile[] = "publisher.pub";
// <store>/cache/debs/: Debian packages downloaded for image builds (reused by later builds).
inline constexpr char kDebCacheDir[] = "cache/debs";

// Inside an image directory: the artifacts, named the same in every image and catalog.
inline constexpr char kDiskFile[] = "disk.raw";
inline constexpr char kKernelFile[] = "vmlinuz";
inline constexpr char kInitrdFile[] = "initrd.img";

}  // namespace cloister::catalog::names
