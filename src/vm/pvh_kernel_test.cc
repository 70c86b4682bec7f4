#include "vm/pvh_kernel.h"

#include <lzma.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "base/file_util.h"

namespace cloister::vm {
namespace {

void Put16(std::string& b, size_t off, uint16_t v) {
  b[off] = static_cast<char>(v & 0xff);
  b[off + 1] = static_cast<char>(v >> 8);
}
void Put32(std::string& b, size_t off, uint32_t v) {
  for (int i = 0; i < 4; ++i) b[off + i] = static_cast<char>((v >> (8 * i)) & 0xff);
}
void Put64(std::string& b, size_t off, uint64_t v) {
  Put32(b, off, static_cast<uint32_t>(v));
  Put32(b, off + 4, static_cast<uint32_t>(v >> 32));
}

// A minimal x86-64 ELF with one PT_NOTE segment holding `note_type` under name "Xen".
std::string Elf(uint32_t note_type) {
  std::string note(12, '\0');
  Put32(note, 0, 4);  // namesz "Xen\0"
  Put32(note, 4, 8);  // descsz
  Put32(note, 8, note_type);
  note += std::string("Xen\0", 4) + std::string(8, '\x11');
  std::string e(64 + 56, '\0');
  e[0] = 0x7f;
  e[1] = 'E';
  e[2] = 'L';
  e[3] = 'F';
  e[4] = 2;
  e[5] = 1;
  Put16(e, 18, 62);   // EM_X86_64
  Put64(e, 32, 64);   // e_phoff
  Put16(e, 54, 56);   // e_phentsize
  Put16(e, 56, 1);    // e_phnum
  Put32(e, 64, 4);    // PT_NOTE
  Put64(e, 64 + 8, e.size());       // p_offset
  Put64(e, 64 + 32, note.size());   // p_filesz
  return e + note + std::string(4096, 'k');  // some "kernel" after it
}

std::string Xz(const std::string& in) {
  std::string out(in.size() + 4096, '\0');
  size_t pos = 0;
  EXPECT_EQ(lzma_easy_buffer_encode(6, LZMA_CHECK_CRC32, nullptr,
                                    reinterpret_cast<const uint8_t*>(in.data()), in.size(),
                                    reinterpret_cast<uint8_t*>(out.data()), &pos, out.size()),
            LZMA_OK);
  out.resize(pos);
  return out;
}

// A bzImage-shaped file: setup header at 0x1f1 with boot protocol 2.15, 4 setup sectors, and the
// payload (plus the 4-byte uncompressed size the kernel's build appends) after them.
std::string BzImage(const std::string& payload, uint32_t uncompressed) {
  std::string b(5 * 512, '\0');
  b[0x1f1] = 4;
  b.replace(0x202, 4, "HdrS");
  Put16(b, 0x206, 0x020f);
  std::string body = payload;
  body.append(4, '\0');
  Put32(body, payload.size(), uncompressed);
  Put32(b, 0x248, 0);                                     // payload_offset (from the PM start)
  Put32(b, 0x24c, static_cast<uint32_t>(body.size()));    // payload_length
  return b + body;
}

TEST(PvhKernelTest, ExtractsTheElfFromAnXzBzImageAndFindsItsPvhNote) {
  std::string elf = Elf(18);
  auto got = ExtractPvhKernel(BzImage(Xz(elf), static_cast<uint32_t>(elf.size())));
  ASSERT_TRUE(got.ok()) << got.error().ToString();
  EXPECT_EQ(*got, elf);
  EXPECT_TRUE(HasPvhEntry(*got));
}

TEST(PvhKernelTest, RefusesWhatItCannotBootThroughPvh) {
  std::string no_pvh = Elf(17);  // another Xen note, not PHYS32_ENTRY
  EXPECT_FALSE(HasPvhEntry(no_pvh));
  auto a = ExtractPvhKernel(BzImage(Xz(no_pvh), 0));
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.error().code(), ErrorCode::kUnavailable);

  std::string elf = Elf(18);
  std::string bz = BzImage(Xz(elf), 0);
  std::string not_bz = bz;
  not_bz.replace(0x202, 4, "XXXX");
  EXPECT_EQ(ExtractPvhKernel(not_bz).error().code(), ErrorCode::kInvalidArgument);
  std::string old_proto = bz;
  Put16(old_proto, 0x206, 0x0206);
  EXPECT_EQ(ExtractPvhKernel(old_proto).error().code(), ErrorCode::kInvalidArgument);
  std::string out_of_file = bz;
  Put32(out_of_file, 0x24c, static_cast<uint32_t>(bz.size()));
  EXPECT_EQ(ExtractPvhKernel(out_of_file).error().code(), ErrorCode::kInvalidArgument);
  std::string gzip = BzImage("\x1f\x8b" + std::string(64, 'g'), 0);
  EXPECT_EQ(ExtractPvhKernel(gzip).error().code(), ErrorCode::kUnavailable);
  // A payload cut short decodes to an error, never to a partial kernel.
  std::string xz = Xz(elf);
  auto cut = ExtractPvhKernel(BzImage(xz.substr(0, xz.size() / 2), 0));
  ASSERT_FALSE(cut.ok());
  EXPECT_EQ(cut.error().code(), ErrorCode::kCorrupt);
  // Notes whose sizes run past their segment are not read.
  std::string bad = elf;
  Put32(bad, 64 + 56 + 4, 0xfffffff0u);  // descsz
  EXPECT_FALSE(HasPvhEntry(bad));
  EXPECT_FALSE(HasPvhEntry(elf.substr(0, 100)));
}

TEST(PvhKernelTest, EnsureDerivesOnceIntoTheCacheAndRederivesABadCacheFile) {
  char dir[] = "/tmp/cloister-pvh-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  std::string elf = Elf(18);
  std::string bz_path = std::string(dir) + "/vmlinuz";
  ASSERT_TRUE(WriteFile(bz_path, BzImage(Xz(elf), 0)).ok());
  std::string cache = std::string(dir) + "/cache/pvh";
  auto first = EnsurePvhKernel(bz_path, cache);
  ASSERT_TRUE(first.ok()) << first.error().ToString();
  EXPECT_EQ(std::filesystem::path(*first).parent_path(), cache);
  EXPECT_EQ(*ReadFileBounded(*first, 1 << 20), elf);
  struct stat st1;
  ASSERT_EQ(stat(first->c_str(), &st1), 0);
  auto second = EnsurePvhKernel(bz_path, cache);
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(*second, *first);
  struct stat st2;
  ASSERT_EQ(stat(second->c_str(), &st2), 0);
  EXPECT_EQ(st1.st_ino, st2.st_ino) << "a good cache file is reused, not rewritten";
  ASSERT_TRUE(WriteFile(*first, "truncated").ok());
  auto third = EnsurePvhKernel(bz_path, cache);
  ASSERT_TRUE(third.ok());
  EXPECT_EQ(*ReadFileBounded(*third, 1 << 20), elf);
  // A kernel that cannot boot through PVH: an error, and nothing cached.
  ASSERT_TRUE(WriteFile(bz_path, BzImage(Xz(Elf(17)), 0)).ok());
  EXPECT_FALSE(EnsurePvhKernel(bz_path, cache).ok());
  size_t files = 0;
  for (auto& e : std::filesystem::directory_iterator(cache)) files += e.is_regular_file();
  EXPECT_EQ(files, 1u);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace cloister::vm
