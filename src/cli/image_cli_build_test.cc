// `cloister image build --test` end to end: build, sign into the local catalog, verify, rebuild to
// the same SHA-256 (the catalog sequence moves, the image does not).
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <sstream>

#include <nlohmann/json.hpp>

#include "catalog/store.h"
#include "cli/cli.h"
#include "image/testing.h"

namespace cloister::cli {
namespace {

namespace fs = std::filesystem;

int Cli(const std::string& store, std::vector<std::string> args, std::string* out,
        std::string* err) {
  std::vector<std::string> full{"cloister", "--store", store};
  full.insert(full.end(), args.begin(), args.end());
  std::vector<const char*> argv;
  for (auto& a : full) argv.push_back(a.c_str());
  std::ostringstream o, e;
  std::istringstream in;
  int code = RunCli(static_cast<int>(argv.size()), argv.data(), o, e, in);
  *out = o.str();
  *err = e.str();
  return code;
}

TEST(ImageCliBuildTest, BuildTestSignsVerifiesAndRebuildsIdentically) {
  image::testing::TempDir t;
  std::string store = t.path() + "/store";
  // Share the test package cache instead of downloading into the temporary store.
  fs::create_directories(store + "/cache");
  fs::create_directories(image::testing::TestCacheDir());
  fs::create_symlink(image::testing::TestCacheDir(), store + "/cache/debs");

  std::string out, err;
  ASSERT_EQ(Cli(store, {"image", "build", "--test"}, &out, &err), 0) << err;
  EXPECT_NE(err.find("image: [5/6] disk: raw ext4"), std::string::npos) << err;  // progress
  EXPECT_NE(out.find("built test"), std::string::npos);
  ASSERT_EQ(Cli(store, {"image", "verify", "test"}, &out, &err), 0) << err;

  catalog::CatalogStore cs(store);
  auto first = cs.Resolve("test", catalog::Rehash::kYes);
  ASSERT_TRUE(first.ok()) << first.error().ToString();
  EXPECT_EQ(first->disk_path, store + "/images/test/disk.raw");
  EXPECT_TRUE(fs::exists(first->kernel_path));
  EXPECT_TRUE(fs::exists(first->initrd_path));

  // A workspace from the built image, by name: it records the signed identity.
  ASSERT_EQ(Cli(store, {"create", "ws", "--image", "test", "--home-size", "64M", "--json"}, &out,
                &err),
            0)
      << err;
  auto created = nlohmann::json::parse(out, nullptr, false);
  ASSERT_FALSE(created.is_discarded()) << out;
  EXPECT_EQ(created["image"]["name"], "test");
  EXPECT_EQ(created["image"]["channel"], "local");
  EXPECT_EQ(created["image"]["sha256"], first->sha256);
  EXPECT_EQ(created["image"]["kernel"], fs::canonical(first->kernel_path).string());
  struct stat before_rebuild;
  ASSERT_EQ(stat(first->disk_path.c_str(), &before_rebuild), 0);

  // The rebuild is byte-identical, so it is published while the workspace uses the image, and
  // the very files the workspace's disk clones or reads through stay in place.
  ASSERT_EQ(Cli(store, {"image", "build", "--test"}, &out, &err), 0) << err;
  auto second = cs.Resolve("test", catalog::Rehash::kYes);
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(second->sha256, first->sha256);
  struct stat after_rebuild;
  ASSERT_EQ(stat(first->disk_path.c_str(), &after_rebuild), 0);
  EXPECT_EQ(after_rebuild.st_ino, before_rebuild.st_ino);
  EXPECT_EQ(after_rebuild.st_mtim.tv_nsec, before_rebuild.st_mtim.tv_nsec);
  EXPECT_EQ(Cli(store, {"image", "rm", "--yes", "test"}, &out, &err), 1);
  EXPECT_NE(err.find("used by 1 workspace (ws)"), std::string::npos) << err;
  ASSERT_EQ(Cli(store, {"rm", "--yes", "ws"}, &out, &err), 0) << err;
  auto c = cs.LoadAdopted("local");
  ASSERT_TRUE(c.ok() && c->has_value());
  EXPECT_EQ((*c)->sequence, 2u);
  // No build leftovers beside the image.
  for (const auto& e : fs::directory_iterator(store + "/images")) {
    EXPECT_EQ(e.path().filename(), "test");
  }

  // --out publishes an importable directory: another store trusting this key imports it.
  std::string pubdir = t.path() + "/published";
  ASSERT_EQ(Cli(store, {"image", "build", "--test", "--out", pubdir, "--channel", "ci"}, &out, &err),
            0)
      << err;
  std::string key;
  ASSERT_EQ(Cli(store, {"image", "key"}, &key, &err), 0);
  std::string other = t.path() + "/other";
  fs::create_directories(other);
  std::string keyfile = t.path() + "/key.pub";
  FILE* f = fopen(keyfile.c_str(), "w");
  fputs(key.c_str(), f);
  fclose(f);
  ASSERT_EQ(Cli(other, {"image", "trust", keyfile, "--channel", "ci"}, &out, &err), 0) << err;
  ASSERT_EQ(Cli(other, {"image", "import", pubdir}, &out, &err), 0) << err;
  auto imported = catalog::CatalogStore(other).Resolve("test", catalog::Rehash::kYes);
  ASSERT_TRUE(imported.ok()) << imported.error().ToString();
  EXPECT_EQ(imported->sha256, first->sha256);
  EXPECT_EQ(imported->channel, "ci");
}

}  // namespace
}  // namespace cloister::cli
