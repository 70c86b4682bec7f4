// Test helpers: synthetic ext4 images made with mkfs.ext4/debugfs in a temp dir.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace cloister::audit::testing {

// A fresh temporary directory, removed by the destructor.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  const std::string& path() const { return path_; }
  std::string File(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// mkfs.ext4 -F -q [extra...] PATH SIZE_KIB (a sparse file); asserts success.
void MakeExt4(const std::string& path, uint64_t size_kib, const std::vector<std::string>& extra = {},
              const std::string& populate_dir = "");
// Runs debugfs -w -R COMMAND PATH; asserts success.
void Debugfs(const std::string& image, const std::string& command);

std::string ReadAll(const std::string& path);
void WriteAll(const std::string& path, const std::string& bytes);
void PatchFile(const std::string& path, uint64_t offset, const std::string& bytes);
// Deterministic non-zero pseudo-random bytes.
std::string NonZeroBytes(size_t n, uint64_t seed);

}  // namespace cloister::audit::testing
