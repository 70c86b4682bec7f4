#include "audit/test_images.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "base/subprocess.h"

namespace cloister::audit::testing {

TempDir::TempDir() {
  std::string tmpl = (std::filesystem::temp_directory_path() / "cloister-audit-XXXXXX").string();
  char* p = mkdtemp(tmpl.data());
  if (p == nullptr) std::abort();
  path_ = p;
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

void MakeExt4(const std::string& path, uint64_t size_kib, const std::vector<std::string>& extra,
              const std::string& populate_dir) {
  std::vector<std::string> argv = {"mkfs.ext4", "-F", "-q", "-E", "nodiscard"};
  // mke2fs.conf picks 1 KiB blocks for small filesystems; tests ask for 4 KiB unless they say.
  if (std::find(extra.begin(), extra.end(), "-b") == extra.end()) {
    argv.push_back("-b");
    argv.push_back("4096");
  }
  argv.insert(argv.end(), extra.begin(), extra.end());
  if (!populate_dir.empty()) {
    argv.push_back("-d");
    argv.push_back(populate_dir);
  }
  argv.push_back(path);
  argv.push_back(std::to_string(size_kib) + "k");
  auto r = RunProcessChecked(argv);
  ASSERT_TRUE(r.ok()) << r.error().ToString();
}

void Debugfs(const std::string& image, const std::string& command) {
  auto r = RunProcessChecked({"debugfs", "-w", "-R", command, image});
  ASSERT_TRUE(r.ok()) << r.error().ToString();
}

std::string ReadAll(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

void WriteAll(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

void PatchFile(const std::string& path, uint64_t offset, const std::string& bytes) {
  std::fstream f(path, std::ios::binary | std::ios::in | std::ios::out);
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string NonZeroBytes(size_t n, uint64_t seed) {
  std::string s(n, '\0');
  uint64_t x = seed * 6364136223846793005ull + 1442695040888963407ull;
  for (size_t i = 0; i < n; ++i) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    s[i] = static_cast<char>(1 + (x >> 33) % 255);
  }
  return s;
}

}  // namespace cloister::audit::testing
