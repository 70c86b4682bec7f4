#include "catalog/sha256.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <fstream>

namespace cloister::catalog {
namespace {

TEST(Sha256Test, KnownVectors) {
  EXPECT_EQ(Sha256Hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(Sha256Hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(Sha256Test, FileMatchesStringDigestAcrossReadChunks) {
  char dir[] = "/tmp/cloister-sha-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  std::string path = std::string(dir) + "/f";
  std::string data(3 * (1 << 20) + 17, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 31 + (i >> 12));
  std::ofstream(path, std::ios::binary) << data;
  auto d = Sha256File(path);
  ASSERT_TRUE(d.ok()) << d.error().ToString();
  EXPECT_EQ(d->size, data.size());
  EXPECT_EQ(d->sha256, Sha256Hex(data));
  unlink(path.c_str());
  rmdir(dir);
}

TEST(Sha256Test, MissingFileIsNotFound) {
  auto d = Sha256File("/nonexistent/cloister/file");
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.error().code(), ErrorCode::kNotFound);
}

}  // namespace
}  // namespace cloister::catalog
