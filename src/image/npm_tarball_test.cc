#include "image/npm_tarball.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>

#include "base/subprocess.h"
#include "image/build_util.h"
#include "image/testing.h"

namespace cloister::image {
namespace {

using testing::TempDir;

TEST(NpmTarballTest, IntegrityIsNpmsSha512SriForm) {
  TempDir t;
  ASSERT_TRUE(WriteFile(t.path() + "/abc", "abc").ok());
  auto got = NpmIntegrityOfFile(t.path() + "/abc");
  ASSERT_TRUE(got.ok()) << got.error().ToString();
  EXPECT_EQ(*got,
            "sha512-3a81oZNherrMQXNJriBBMRLm+k6JqX6iCp7u5ktV05ohkpkqJ0/BqDa6PCOj/uu9RU1EI2Q86A4qmslPpUyknw==");
  EXPECT_FALSE(NpmIntegrityOfFile(t.path() + "/absent").ok());
}

TEST(NpmTarballTest, AMissingOrAlteredTarballIsRefusedWithAHint) {
  TempDir t;
  NpmTarball pin{"demo", "1.0.0", "demo-1.0.0.tgz",
                 "sha512-3a81oZNherrMQXNJriBBMRLm+k6JqX6iCp7u5ktV05ohkpkqJ0/BqDa6PCOj/uu9RU1EI2Q86A4qmslPpUyknw=="};
  auto missing = VerifiedNpmTarball(pin, t.path());
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().code(), ErrorCode::kNotFound);
  EXPECT_NE(missing.error().ToString().find("install-deps.sh"), std::string::npos);

  ASSERT_TRUE(WriteFile(t.path() + "/demo-1.0.0.tgz", "abd").ok());
  auto altered = VerifiedNpmTarball(pin, t.path());
  ASSERT_FALSE(altered.ok());
  EXPECT_EQ(altered.error().code(), ErrorCode::kCorrupt);

  ASSERT_TRUE(WriteFile(t.path() + "/demo-1.0.0.tgz", "abc").ok());
  auto good = VerifiedNpmTarball(pin, t.path());
  ASSERT_TRUE(good.ok()) << good.error().ToString();
  EXPECT_EQ(*good, t.path() + "/demo-1.0.0.tgz");
}

TEST(NpmTarballTest, UnpackMovesThePackageDirectoryIntoPlace) {
  TempDir t;
  ASSERT_TRUE(MakeDirs(t.path() + "/src/package/bin").ok());
  ASSERT_TRUE(WriteFile(t.path() + "/src/package/bin/tool.js", "#!/usr/bin/env node\n", 0755).ok());
  ASSERT_TRUE(WriteFile(t.path() + "/src/package/package.json", "{\"name\":\"demo\"}").ok());
  ASSERT_TRUE(RunProcessChecked({"tar", "-czf", t.path() + "/demo.tgz", "-C", t.path() + "/src",
                                 "package"}).ok());
  std::string dest = t.path() + "/root/usr/local/lib/node_modules/demo";
  auto s = UnpackNpmTarball(t.path() + "/demo.tgz", dest);
  ASSERT_TRUE(s.ok()) << s.error().ToString();
  auto pj = ReadFile(dest + "/package.json");
  ASSERT_TRUE(pj.ok());
  EXPECT_EQ(*pj, "{\"name\":\"demo\"}");
  EXPECT_TRUE(std::filesystem::exists(dest + "/bin/tool.js"));
  EXPECT_FALSE(std::filesystem::exists(dest + ".unpack"));
  // Never over an existing directory.
  EXPECT_FALSE(UnpackNpmTarball(t.path() + "/demo.tgz", dest).ok());
  // A tarball without package/ is refused.
  ASSERT_TRUE(RunProcessChecked({"tar", "-czf", t.path() + "/bad.tgz", "-C", t.path() + "/src/package",
                                 "package.json"}).ok());
  EXPECT_FALSE(UnpackNpmTarball(t.path() + "/bad.tgz", t.path() + "/other").ok());
}

// install-deps.sh fetches what the image builder and the real-install tests pin: the same spec,
// file and integrity.
TEST(NpmTarballTest, InstallDepsPinsTheTarballTheTestImageNeeds) {
  const char* src = std::getenv("CLOISTER_SOURCE_DIR");
  ASSERT_TRUE(src != nullptr && *src) << "ctest sets CLOISTER_SOURCE_DIR";
  auto script = ReadFile(std::string(src) + "/scripts/install-deps.sh");
  ASSERT_TRUE(script.ok()) << script.error().ToString();
  for (const NpmTarball& t : {kTestImageNpm, kDebianNpm}) {
    std::string line = std::string(t.name) + "@" + std::string(t.version) + " " +
                       std::string(t.file) + " " + std::string(t.integrity);
    EXPECT_NE(script->find(line), std::string::npos) << line;
  }
}

}  // namespace
}  // namespace cloister::image
