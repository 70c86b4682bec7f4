// Test-only (header-only; never included by the product): a whole file's text, for tests that
// read back what the code under test wrote. Unbounded: tests read their own small files.
#pragma once

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

namespace cloister::testfile {

// The file's bytes, or "" when it cannot be opened.
inline std::string Slurp(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

}  // namespace cloister::testfile
