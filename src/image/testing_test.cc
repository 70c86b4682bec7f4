// The shared test image helpers other modules' VM tests rely on.
#include "image/testing.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>

#include "base/strings.h"
#include "base/subprocess.h"
#include "catalog/sha256.h"

namespace cloister::image::testing {
namespace {

// Block count x block size from the superblock.
uint64_t FilesystemBytes(const std::string& disk) {
  auto r = RunProcess({"dumpe2fs", "-h", disk});
  if (!r.ok()) return 0;
  uint64_t blocks = 0, size = 0;
  for (const auto& line : Split(r->out, '\n')) {
    auto value = [&](const char* key) -> uint64_t {
      if (!StartsWith(line, key)) return 0;
      std::string v = Trim(line.substr(std::string(key).size()));
      return v.empty() ? 0 : std::strtoull(v.c_str(), nullptr, 10);
    };
    if (uint64_t v = value("Block count:")) blocks = v;
    if (uint64_t v = value("Block size:")) size = v;
  }
  return blocks * size;
}

TEST(SharedTestImageTest, AGrownCopyHasTheBiggerFilesystemAndLeavesTheBaseAlone) {
  auto base = SharedTestImage();
  ASSERT_TRUE(base.ok()) << base.error().ToString();
  uint64_t base_fs = FilesystemBytes(base->dir + "/disk.raw");
  ASSERT_GT(base_fs, 0u);

  constexpr uint64_t kBig = 640ull << 20;
  auto big = SharedTestImageWithDisk(kBig);
  ASSERT_TRUE(big.ok()) << big.error().ToString();
  EXPECT_NE(big->dir, base->dir);
  EXPECT_EQ(std::filesystem::file_size(big->dir + "/disk.raw"), kBig);
  EXPECT_EQ(FilesystemBytes(big->dir + "/disk.raw"), kBig);
  EXPECT_LT(base_fs, kBig);
  // The base is untouched and the kernel and initramfs are the same files' bytes.
  auto again = SharedTestImage();
  ASSERT_TRUE(again.ok());
  ASSERT_EQ(again->entry.artifacts.size(), 3u);
  ASSERT_EQ(big->entry.artifacts.size(), 3u);
  EXPECT_EQ(again->entry.artifacts[0].sha256, base->entry.artifacts[0].sha256);
  EXPECT_NE(big->entry.artifacts[0].sha256, base->entry.artifacts[0].sha256);
  EXPECT_EQ(big->entry.artifacts[1].sha256, base->entry.artifacts[1].sha256);
  EXPECT_EQ(big->entry.artifacts[2].sha256, base->entry.artifacts[2].sha256);
  // The filesystem is clean after the resize.
  auto fsck = RunProcess({"e2fsck", "-f", "-n", big->dir + "/disk.raw"});
  ASSERT_TRUE(fsck.ok());
  EXPECT_EQ(fsck->exit_code, 0) << fsck->out << fsck->err;
  // A second call reuses the copy.
  auto reuse = SharedTestImageWithDisk(kBig);
  ASSERT_TRUE(reuse.ok());
  EXPECT_EQ(reuse->entry.artifacts[0].sha256, big->entry.artifacts[0].sha256);
}

}  // namespace
}  // namespace cloister::image::testing
