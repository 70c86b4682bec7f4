// SHA-256 of files and strings (OpenSSL EVP).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "base/result.h"

namespace cloister::catalog {

struct FileDigest {
  uint64_t size = 0;
  std::string sha256;  // lower-case hex
};

// Streams the file through SHA-256 (1 MiB reads). Sparse holes are read as zeros, like sha256sum.
Result<FileDigest> Sha256File(const std::string& path);

// SHA-256 of bytes, lower-case hex.
std::string Sha256Hex(std::string_view bytes);

}  // namespace cloister::catalog
