// The VM fixture's host-side search must not miss a needle: a test that scans a disk image for a
// secret passes wrongly if a match straddling two read chunks is lost.
#include "vm/testing.h"

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

TEST(CountInFileTest, OverlappingTailIsNotCountedTwice) {
  std::string path = WriteTemp("aaaa");
  EXPECT_EQ(CountInFile(path, "aa"), 2u);  // non-overlapping matches
  EXPECT_EQ(CountInFile("/nonexistent/file", "aa"), 0u);
  unlink(path.c_str());
}

}  // namespace
}  // namespace cloister::vm::testing
