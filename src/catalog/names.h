// Store-relative names used by the catalog and image modules: aliases of the constants in
// src/store/layout.h, which is the one place store file names are defined (docs/layout.md says
// what writes and deletes each one). Kept as `const char*` so module code can concatenate them.
#pragma once

#include "store/layout.h"

namespace cloister::catalog::names {

inline constexpr const char* kImagesDir = layout::kImagesDir.data();
inline constexpr const char* kKeysDir = layout::kKeysDir.data();
inline constexpr const char* kCatalogsDir = layout::kCatalogsDir.data();
inline constexpr const char* kCatalogFile = layout::kCatalogFile.data();
inline constexpr const char* kSignatureFile = layout::kCatalogSignatureFile.data();
inline constexpr const char* kCatalogStagingPrefix = layout::kCatalogStagingPrefix.data();
inline constexpr const char* kLockFile = layout::kCatalogLockFile.data();
inline constexpr const char* kKeyringFile = layout::kKeyringFile.data();
inline constexpr const char* kPublisherKeyFile = layout::kPublisherKeyFile.data();
inline constexpr const char* kPublisherPubFile = layout::kPublisherPubFile.data();
inline constexpr const char* kDebCacheDir = layout::kDebCacheDir.data();

inline constexpr const char* kDiskFile = layout::kImageDiskFile.data();
inline constexpr const char* kKernelFile = layout::kImageKernelFile.data();
inline constexpr const char* kInitrdFile = layout::kImageInitrdFile.data();
inline constexpr const char* kVerifiedFile = layout::kImageVerifiedFile.data();
inline constexpr const char* kBuildPrefix = layout::kImageBuildPrefix.data();
inline constexpr const char* kWorkPrefix = layout::kImageWorkPrefix.data();
inline constexpr const char* kImportPrefix = layout::kImageImportPrefix.data();
inline constexpr const char* kRemovePrefix = layout::kImageRemovePrefix.data();

}  // namespace cloister::catalog::names
