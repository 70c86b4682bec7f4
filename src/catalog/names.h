// Store-relative names of the catalog and image modules, defined here because the catalog sits
// below the store (it does not include or link it): src/store/layout.h, the index of every store
// file name, aliases these (layout::kImagesDir == names::kImagesDir), and docs/layout.md says what
// writes and deletes each one. char arrays, so module code can concatenate them and layout.h can
// view them as std::string_view.
#pragma once

namespace cloister::catalog::names {

// Directly under the store root.
inline constexpr char kImagesDir[] = "images";  // images/<name>/: one per image (artifacts below)
inline constexpr char kKeysDir[] = "keys";      // store-wide keys (keyring, vault master key...)
inline constexpr char kCatalogsDir[] = "catalogs";  // catalogs/<channel>/: adopted catalogs
inline constexpr char kDebCacheDir[] = "cache/debs";  // .debs downloaded for image builds

// catalogs/<channel>/{catalog.json,catalog.json.sig}; catalogs/.staging-<channel>/ while one is
// adopted; catalogs/.lock (and keys/.lock) serialise catalog mutations.
inline constexpr char kCatalogFile[] = "catalog.json";
inline constexpr char kSignatureFile[] = "catalog.json.sig";
inline constexpr char kCatalogStagingPrefix[] = ".staging-";
inline constexpr char kLockFile[] = ".lock";
// keys/keyring.json (trusted publisher keys); keys/publisher.key (0600) and publisher.pub.
inline constexpr char kKeyringFile[] = "keyring.json";
inline constexpr char kPublisherKeyFile[] = "publisher.key";
inline constexpr char kPublisherPubFile[] = "publisher.pub";

// images/<name>/: the artifacts, verified.json, and the in-progress directory prefixes.
inline constexpr char kDiskFile[] = "disk.raw";      // raw ext4, no partition table
inline constexpr char kKernelFile[] = "vmlinuz";     // for direct kernel boot
inline constexpr char kInitrdFile[] = "initrd.img";  // mounts /dev/vda
inline constexpr char kVerifiedFile[] = "verified.json";
inline constexpr char kBuildPrefix[] = ".build-";
inline constexpr char kWorkPrefix[] = ".work-";
inline constexpr char kImportPrefix[] = ".import-";
inline constexpr char kRemovePrefix[] = ".rm-";

}  // namespace cloister::catalog::names
