// The ext4 allocation reader against images made by mkfs.ext4, checked against dumpe2fs, and
// against damaged images (label integration: runs e2fsprogs).
#include "audit/ext4.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <set>
#include <unistd.h>

#include "audit/audit.h"
#include "audit/test_images.h"
#include "base/strings.h"
#include "base/subprocess.h"

namespace cloister::audit {
namespace {

using testing::Debugfs;
using testing::MakeExt4;
using testing::NonZeroBytes;
using testing::PatchFile;
using testing::ReadAll;
using testing::TempDir;
using testing::WriteAll;

// Free blocks according to dumpe2fs ("Free blocks: 10-20, 30").
std::set<uint64_t> DumpeFree(const std::string& img) {
  auto r = RunProcessChecked({"dumpe2fs", img});
  EXPECT_TRUE(r.ok());
  std::set<uint64_t> free;
  for (const std::string& line : Split(r->out, '\n')) {
    // Per-group lines are indented; the unindented header line is the total count.
    if (!StartsWith(line, "  Free blocks: ")) continue;
    std::string t = Trim(line);
    for (const std::string& part : Split(t.substr(12), ',')) {
      std::string p = Trim(part);
      if (p.empty()) continue;
      auto dash = p.find('-');
      uint64_t a = std::stoull(p.substr(0, dash));
      uint64_t b = dash == std::string::npos ? a : std::stoull(p.substr(dash + 1));
      for (uint64_t x = a; x <= b; ++x) free.insert(x);
    }
  }
  return free;
}

std::set<uint64_t> OurFree(const std::string& img) {
  auto dev = OpenDevice(img, OpenOptions{});
  EXPECT_TRUE(dev.ok());
  auto map = ReadExt4Map(**dev);
  EXPECT_TRUE(map.ok()) << map.error().ToString();
  std::set<uint64_t> free;
  if (!map.ok()) return free;
  for (uint64_t b = 0; b < map->blocks_count(); ++b) {
    if (map->IsFree(b)) free.insert(b);
  }
  EXPECT_EQ(free.size(), map->free_blocks());
  return free;
}

class Ext4MapTest : public ::testing::TestWithParam<std::vector<std::string>> {};

TEST_P(Ext4MapTest, FreeBlocksEqualDumpe2fs) {
  TempDir dir;
  std::string root = dir.File("root");
  std::filesystem::create_directories(root);
  for (int i = 0; i < 5; ++i) WriteAll(root + "/f" + std::to_string(i), NonZeroBytes(200000, i));
  std::string img = dir.File("fs.img");
  MakeExt4(img, 40 * 1024, GetParam(), root);
  Debugfs(img, "rm /f1");
  auto ours = OurFree(img);
  auto theirs = DumpeFree(img);
  EXPECT_GT(theirs.size(), 1000u);
  std::string diff;
  for (uint64_t b : theirs) {
    if (!ours.count(b)) diff += " -" + std::to_string(b);
  }
  for (uint64_t b : ours) {
    if (!theirs.count(b)) diff += " +" + std::to_string(b);
  }
  EXPECT_TRUE(ours == theirs) << "ours " << ours.size() << " dumpe2fs " << theirs.size() << diff.substr(0, 200);
}

INSTANTIATE_TEST_SUITE_P(Layouts, Ext4MapTest,
                         ::testing::Values(std::vector<std::string>{},
                                           std::vector<std::string>{"-b", "1024"},
                                           std::vector<std::string>{"-b", "2048", "-O", "^metadata_csum,uninit_bg"},
                                           std::vector<std::string>{"-O", "^metadata_csum,^uninit_bg,^flex_bg,^64bit"},
                                           std::vector<std::string>{"-b", "1024", "-O", "^metadata_csum,^uninit_bg,^flex_bg,^64bit"},
                                           std::vector<std::string>{"-O", "^resize_inode,meta_bg", "-g", "1024", "-b", "1024"}));

class DamagedImageTest : public ::testing::Test {
 protected:
  void SetUp() override {
    img_ = dir_.File("fs.img");
    MakeExt4(img_, 16 * 1024);
  }
  // Audits the image; expects an error with `code` whose message contains `words`, and the image
  // untouched.
  void ExpectRefused(ErrorCode code, const std::string& words) {
    std::string before = ReadAll(img_);
    DiskAuditOptions o;
    auto r = AuditDisk(img_, o);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error().code(), code) << r.error().ToString();
    EXPECT_NE(r.error().message().find(words), std::string::npos) << r.error().ToString();
    EXPECT_TRUE(ReadAll(img_) == before) << "a refused audit wrote to the disk";
  }
  uint64_t BlockBitmapOfGroup0() {
    auto r = RunProcessChecked({"dumpe2fs", img_});
    EXPECT_TRUE(r.ok());
    for (const std::string& line : Split(r->out, '\n')) {
      auto at = line.find("Block bitmap at ");
      if (at != std::string::npos) return std::stoull(line.substr(at + 16));
    }
    ADD_FAILURE();
    return 0;
  }
  TempDir dir_;
  std::string img_;
};

TEST_F(DamagedImageTest, BadMagic) {
  PatchFile(img_, 1024 + 0x38, std::string(2, '\0'));
  ExpectRefused(ErrorCode::kCorrupt, "magic");
}

TEST_F(DamagedImageTest, SuperblockChecksum) {
  PatchFile(img_, 1024 + 0x20, std::string("\x01", 1));  // blocks per group
  ExpectRefused(ErrorCode::kCorrupt, "superblock checksum");
}

TEST_F(DamagedImageTest, BlockBitmapChecksum) {
  uint64_t bb = BlockBitmapOfGroup0();
  PatchFile(img_, bb * 4096 + 2000, "\x5a");
  ExpectRefused(ErrorCode::kCorrupt, "block bitmap checksum");
}

TEST_F(DamagedImageTest, GroupDescriptorChecksum) {
  PatchFile(img_, 4096 + 0x0C, "\x33");  // group 0's free blocks count
  ExpectRefused(ErrorCode::kCorrupt, "descriptor checksum");
}

TEST_F(DamagedImageTest, TruncatedDevice) {
  ASSERT_EQ(truncate(img_.c_str(), 8 << 20), 0);
  ExpectRefused(ErrorCode::kCorrupt, "device holds only");
}

TEST_F(DamagedImageTest, TooSmall) {
  WriteAll(img_, "tiny");
  ExpectRefused(ErrorCode::kCorrupt, "too small");
}

TEST_F(DamagedImageTest, JournalNeedsRecovery) {
  Debugfs(img_, "feature needs_recovery");
  ExpectRefused(ErrorCode::kFailedPrecondition, "journal needs recovery");
}

TEST(DamagedNoChecksumTest, FieldsOutOfRangeAreNamed) {
  TempDir dir;
  std::string img = dir.File("fs.img");
  // Without metadata_csum nothing guards the fields but the range checks.
  MakeExt4(img, 16 * 1024, {"-O", "^metadata_csum,^uninit_bg"});
  std::string pristine = ReadAll(img);
  struct Case {
    uint64_t off;
    std::string bytes;
    std::string words;
  };
  for (const Case& c : std::vector<Case>{
           {1024 + 0x18, std::string("\x09\0\0\0", 4), "block size"},
           {1024 + 0x20, std::string("\0\0\0\0", 4), "s_blocks_per_group"},
           {1024 + 0x04, std::string("\xff\xff\xff\x7f", 4), "device holds only"},
           {1024 + 0x58, std::string("\x10\0", 2), "inode size"},
           {1024 + 0x60, std::string("\x00\x00\x00\x01", 4), "unsupported incompatible"},
           {4096 + 0x00, std::string("\xff\xff\xff\x0f", 4), "points outside"},
       }) {
    WriteAll(img, pristine);
    PatchFile(img, c.off, c.bytes);
    auto dev = OpenDevice(img, OpenOptions{});
    ASSERT_TRUE(dev.ok());
    auto m = ReadExt4Map(**dev);
    ASSERT_FALSE(m.ok()) << c.words;
    EXPECT_NE(m.error().message().find(c.words), std::string::npos) << m.error().ToString();
  }
}

}  // namespace
}  // namespace cloister::audit
