// The VM fixture's host-side search must not miss a needle: a test that scans a disk image for a
// secret passes wrongly if a match straddling two read chunks is lost.
#include "supervisor/testing.h"

#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <fstream>
#include <string>

namespace cloister::vm::testing {
namespace {

std::string WriteTemp(const std::string& content) {
  char t[] = "/tmp/cl-count-XXXXXX";
  int fd = mkstemp(t);
  EXPECT_GE(fd, 0);
  close(fd);
  std::ofstream(t, std::ios::binary) << content;
  return t;
}

TEST(CountInFileTest, FindsMatchesAcrossChunkBoundariesOnceEach) {
  const std::string needle = "sk-ant-REAL-0123456789";
  const size_t chunk = 4 << 20;
  std::string data(3 * chunk, '\0');
  data.replace(10, needle.size(), needle);                     // inside the first chunk
  data.replace(chunk - 7, needle.size(), needle);              // straddles chunks 1 and 2
  data.replace(2 * chunk - needle.size(), needle.size(), needle);  // ends exactly at chunk 2's end
  data.replace(3 * chunk - needle.size(), needle.size(), needle);  // the file's last bytes
  std::string path = WriteTemp(data);
  EXPECT_EQ(CountInFile(path, needle), 4u);
  EXPECT_EQ(CountInFile(path, "not-there"), 0u);
  unlink(path.c_str());
}

TEST(CountInFileTest, ASparseFileIsSearchedInItsDataOnly) {
  // 16 GiB apparent size, three data regions: a needle in each, one across two 4 MiB reads, and
  // one split by a hole (not a match: the hole's zeros are in between).
  const std::string needle = "sk-ant-REAL-0123456789";
  std::string path = WriteTemp("");
  int fd = open(path.c_str(), O_WRONLY);
  ASSERT_GE(fd, 0);
  auto put = [&](off_t at, const std::string& s) {
    ASSERT_EQ(pwrite(fd, s.data(), s.size(), at), static_cast<ssize_t>(s.size()));
  };
  const off_t gib = 1ll << 30;
  put(0, "head " + needle);
  std::string big(9 << 20, 'x');  // spans several reads
  big.replace((4 << 20) - 5, needle.size(), needle);
  put(3 * gib, big);
  put(9 * gib, needle.substr(0, 10));                  // the needle's first part, then a hole,
  put(9 * gib + (64 << 20), needle.substr(10));        // then its rest: no match
  put(16 * gib - static_cast<off_t>(needle.size()), needle);  // the file's last bytes
  close(fd);
  EXPECT_EQ(CountInFile(path, needle), 3u);
  unlink(path.c_str());
  // A needle with a NUL is searched in the zeros too (a small file: this reads its hole).
  path = WriteTemp("");
  fd = open(path.c_str(), O_WRONLY);
  ASSERT_GE(fd, 0);
  put(0, "x");
  put(1 << 20, "y");
  close(fd);
  EXPECT_EQ(CountInFile(path, std::string("x\0", 2)), 1u);
  EXPECT_EQ(CountInFile(path, std::string("\0y", 2)), 1u);
  unlink(path.c_str());
}

TEST(CountInFileTest, OverlappingTailIsNotCountedTwice) {
  std::string path = WriteTemp("aaaa");
  EXPECT_EQ(CountInFile(path, "aa"), 2u);  // non-overlapping matches
  EXPECT_EQ(CountInFile("/nonexistent/file", "aa"), 0u);
  unlink(path.c_str());
}

}  // namespace
}  // namespace cloister::vm::testing
