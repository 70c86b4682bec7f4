// The OCI archive test helper (image/oci/testing.h) writes what `oci-archive:` takes: read back
// with libarchive, every blob is where its digest says and the same folder gives the same bytes.
#include "image/oci/testing.h"

#include <archive.h>
#include <archive_entry.h>

#include <filesystem>
#include <fstream>
#include <map>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "base/testing_file.h"
#include "catalog/sha256.h"
#include "image/testing.h"

namespace cloister::image::oci::testing {
namespace {

namespace fs = std::filesystem;

std::map<std::string, std::string> ReadTar(const std::string& bytes) {
  std::map<std::string, std::string> out;
  struct archive* a = archive_read_new();
  archive_read_support_format_tar(a);
  archive_read_open_memory(a, bytes.data(), bytes.size());
  struct archive_entry* e;
  while (archive_read_next_header(a, &e) == ARCHIVE_OK) {
    std::string data(static_cast<size_t>(archive_entry_size(e)), '\0');
    if (!data.empty()) archive_read_data(a, data.data(), data.size());
    std::string name = archive_entry_pathname(e);
    if (archive_entry_filetype(e) == AE_IFLNK) data = std::string("-> ") + archive_entry_symlink(e);
    out[name] = data;
  }
  archive_read_free(a);
  return out;
}

TEST(OciArchiveTest, ALayoutWhoseDigestsHoldAndWhoseBytesRepeat) {
  image::testing::TempDir t;
  fs::path root = fs::path(t.path()) / "rootfs";
  fs::create_directories(root / "bin");
  std::ofstream(root / "bin" / "tool") << "#!/bin/sh\necho tool\n";
  fs::create_symlink("tool", root / "bin" / "alias");
  std::string a = t.path() + "/a.tar", b = t.path() + "/b.tar";
  auto digest = WriteOciArchive(root.string(), a, {{"PATH", "/bin"}}, "1");
  ASSERT_TRUE(digest.ok()) << digest.error().message();
  ASSERT_TRUE(WriteOciArchive(root.string(), b, {{"PATH", "/bin"}}, "1").ok());
  EXPECT_EQ(testfile::Slurp(a), testfile::Slurp(b));
  auto files = ReadTar(testfile::Slurp(a));
  auto index = nlohmann::json::parse(files.at("index.json"));
  EXPECT_EQ(index["manifests"][0]["digest"], *digest);
  EXPECT_EQ(index["manifests"][0]["annotations"]["org.opencontainers.image.ref.name"], "1");
  for (const auto& [name, data] : files) {
    if (name.rfind("blobs/sha256/", 0) == 0 && name.size() > 13 && name.back() != '/') {
      EXPECT_EQ(name.substr(13), catalog::Sha256Hex(data)) << name;
    }
  }
  auto manifest = nlohmann::json::parse(files.at("blobs/sha256/" + digest->substr(7)));
  std::string layer_digest = manifest["layers"][0]["digest"];
  auto layer = ReadTar(files.at("blobs/sha256/" + layer_digest.substr(7)));
  EXPECT_EQ(layer.at("bin/tool"), "#!/bin/sh\necho tool\n");
  EXPECT_EQ(layer.at("bin/alias"), "-> tool");
  auto config = nlohmann::json::parse(files.at("blobs/sha256/" + std::string(manifest["config"]["digest"]).substr(7)));
  EXPECT_EQ(config["architecture"], "amd64");
  EXPECT_EQ(config["config"]["Env"][0], "PATH=/bin");
  EXPECT_EQ(config["rootfs"]["diff_ids"][0], layer_digest);
}

}  // namespace
}  // namespace cloister::image::oci::testing
