// EnsureNpmTarball (image/npm_tarball.h) with the host's real npm against a local fake registry
// (proxy/npm_fake.h, plain HTTP on 127.0.0.1): a pinned tarball missing from the cache is fetched
// on first use and kept only when its digest is the pin's; a second use fetches nothing.
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "base/subprocess.h"
#include "image/npm_tarball.h"
#include "proxy/npm_fake.h"

namespace cloister::image {
namespace {

namespace fs = std::filesystem;

// Sets environment variables for one test and puts the old values back.
class ScopedEnv {
 public:
  void Set(const std::string& k, const std::optional<std::string>& v) {
    if (!saved_.count(k)) {
      const char* old = getenv(k.c_str());
      saved_[k] = old ? std::optional<std::string>(old) : std::nullopt;
    }
    if (v) setenv(k.c_str(), v->c_str(), 1);
    else unsetenv(k.c_str());
  }
  ~ScopedEnv() {
    for (const auto& [k, v] : saved_) {
      if (v) setenv(k.c_str(), v->c_str(), 1);
      else unsetenv(k.c_str());
    }
  }

 private:
  std::map<std::string, std::optional<std::string>> saved_;
};

class NpmFetchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!ProgramExists("npm")) GTEST_SKIP() << "npm is not installed here";
    root_ = fs::temp_directory_path() / ("cloister-npm-fetch-" + std::to_string(getpid()));
    fs::remove_all(root_);
    fs::create_directories(root_ / "src");
    fs::create_directories(root_ / "registry");
    fs::create_directories(root_ / "home");
    std::ofstream(root_ / "src" / "package.json")
        << R"({"name": "@cloister-test/pinned", "version": "1.0.0"})";
    std::ofstream(root_ / "src" / "index.js") << "module.exports = 42;\n";
    // npm as a user has it: its own home, cache and config, none of this host's registry or proxy.
    env_.Set("HOME", (root_ / "home").string());
    env_.Set("npm_config_cache", (root_ / "npm-cache").string());
    env_.Set("npm_config_userconfig", (root_ / "npmrc").string());
    for (const char* v : {"HTTPS_PROXY", "HTTP_PROXY", "https_proxy", "http_proxy", "ALL_PROXY",
                          "all_proxy", "npm_config_proxy", "npm_config_https_proxy"}) {
      env_.Set(v, std::nullopt);
    }
    RunOptions o;
    o.cwd = (root_ / "registry").string();
    auto packed = RunProcess({"npm", "pack", "--silent", (root_ / "src").string()}, o);
    ASSERT_TRUE(packed.ok() && packed->success())
        << (packed.ok() ? packed->err : packed.error().ToString());
    auto integrity = NpmIntegrityOfFile((root_ / "registry" / kFile).string());
    ASSERT_TRUE(integrity.ok());
    integrity_ = *integrity;
    auto fake = proxy::testing::NpmRegistryFake::Load((root_ / "registry").string());
    ASSERT_TRUE(fake.ok()) << fake.error().ToString();
    fake_ = *fake;
    auto server = proxy::testing::FakeUpstream::Start(nullptr, fake_->handler());
    ASSERT_TRUE(server.ok());
    server_ = std::move(*server);
    env_.Set("npm_config_registry", "http://" + server_->Address() + "/");
    cache_ = (root_ / "cache").string();
  }
  void TearDown() override {
    server_.reset();
    if (!root_.empty()) fs::remove_all(root_);
  }

  int TarballRequests() const {
    int n = 0;
    for (const auto& r : server_->requests()) n += r.target.find(".tgz") != std::string::npos;
    return n;
  }
  // Everything in the cache directory, by name.
  std::vector<std::string> CacheEntries() const {
    std::vector<std::string> names;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(cache_, ec)) names.push_back(e.path().filename());
    return names;
  }

  static constexpr char kFile[] = "cloister-test-pinned-1.0.0.tgz";
  ScopedEnv env_;
  fs::path root_;
  std::string integrity_, cache_;
  std::shared_ptr<proxy::testing::NpmRegistryFake> fake_;
  std::unique_ptr<proxy::testing::FakeUpstream> server_;
};

TEST_F(NpmFetchTest, AMissingTarballIsFetchedOnFirstUseWithProgressAndThenReused) {
  NpmTarball pin{"@cloister-test/pinned", "1.0.0", kFile, integrity_};
  std::vector<std::string> progress;
  auto got = EnsureNpmTarball(pin, cache_, [&](const std::string& l) { progress.push_back(l); });
  ASSERT_TRUE(got.ok()) << got.error().ToString();
  EXPECT_EQ(*got, cache_ + "/" + kFile);
  auto digest = NpmIntegrityOfFile(*got);
  ASSERT_TRUE(digest.ok());
  EXPECT_EQ(*digest, integrity_);
  EXPECT_EQ(CacheEntries(), std::vector<std::string>{kFile});  // no temporary left behind
  EXPECT_EQ(TarballRequests(), 1);
  ASSERT_EQ(progress.size(), 2u);
  EXPECT_NE(progress[0].find("fetching @cloister-test/pinned@1.0.0"), std::string::npos)
      << progress[0];
  EXPECT_NE(progress[1].find("integrity checked"), std::string::npos) << progress[1];

  // The second use reads the cache: nothing is fetched, nothing is said.
  progress.clear();
  auto again = EnsureNpmTarball(pin, cache_, [&](const std::string& l) { progress.push_back(l); });
  ASSERT_TRUE(again.ok()) << again.error().ToString();
  EXPECT_EQ(*again, *got);
  EXPECT_EQ(TarballRequests(), 1);
  EXPECT_TRUE(progress.empty());
}

TEST_F(NpmFetchTest, ATarballWhoseDigestIsNotThePinIsRefusedAndNothingIsKept) {
  // The registry serves its bytes; the pin says other bytes (sha512 of "abc").
  NpmTarball pin{"@cloister-test/pinned", "1.0.0", kFile,
                 "sha512-3a81oZNherrMQXNJriBBMRLm+k6JqX6iCp7u5ktV05ohkpkqJ0/BqDa6PCOj/uu9RU1EI2Q86A4qmslPpUyknw=="};
  auto got = EnsureNpmTarball(pin, cache_, nullptr);
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.error().code(), ErrorCode::kCorrupt);
  EXPECT_NE(got.error().ToString().find("is not the pinned"), std::string::npos)
      << got.error().ToString();
  EXPECT_EQ(TarballRequests(), 1);
  EXPECT_TRUE(CacheEntries().empty());  // neither the tarball nor the fetch directory
  // And the next build does not take it from the cache either: it fetches and refuses again.
  EXPECT_FALSE(EnsureNpmTarball(pin, cache_, nullptr).ok());
  EXPECT_TRUE(CacheEntries().empty());
}

TEST_F(NpmFetchTest, AVersionTheRegistryDoesNotHaveIsNpmsErrorNamed) {
  NpmTarball pin{"@cloister-test/pinned", "9.9.9", "cloister-test-pinned-9.9.9.tgz", integrity_};
  auto got = EnsureNpmTarball(pin, cache_, nullptr);
  ASSERT_FALSE(got.ok());
  EXPECT_NE(got.error().ToString().find("npm pack @cloister-test/pinned@9.9.9 failed"),
            std::string::npos)
      << got.error().ToString();
  EXPECT_TRUE(CacheEntries().empty());
}

TEST_F(NpmFetchTest, WithoutNpmItSaysWhatToInstall) {
  env_.Set("PATH", (root_ / "home").string());  // a directory without npm
  NpmTarball pin{"@cloister-test/pinned", "1.0.0", kFile, integrity_};
  auto got = EnsureNpmTarball(pin, cache_, nullptr);
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.error().code(), ErrorCode::kUnavailable);
  EXPECT_NE(got.error().ToString().find("install npm"), std::string::npos)
      << got.error().ToString();
  EXPECT_EQ(TarballRequests(), 0);
}

}  // namespace
}  // namespace cloister::image
