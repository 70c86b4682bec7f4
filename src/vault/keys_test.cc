// The master key's backend selection (vault/keys.h), with a fake `secret-tool` on PATH standing in
// for the user's Secret Service (none runs on a build machine): which backend is chosen, that the
// Secret Service path writes no key file, and that an explicit backend that cannot work fails
// closed.
#include "vault/keys.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <vector>

namespace cloister::vault {
namespace {

namespace fs = std::filesystem;

class MasterKeyBackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/cloister-keys-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    fs::create_directories(dir_ + "/bin");
    for (const char* v : {"PATH", "DBUS_SESSION_BUS_ADDRESS", "FAKE_SECRET_STORE", "FAKE_SECRET_FAIL"}) {
      const char* old = getenv(v);
      saved_.push_back({v, old ? std::optional<std::string>(old) : std::nullopt});
    }
    // `secret-tool lookup ...` prints the stored secret (exit 1 when none); `store` reads it from
    // stdin. The store is a file the test can read.
    std::ofstream(dir_ + "/bin/secret-tool")
        << "#!/bin/sh\n"
           "case \"$1\" in\n"
           "  lookup) [ -s \"$FAKE_SECRET_STORE\" ] || exit 1; cat \"$FAKE_SECRET_STORE\";;\n"
           "  store) [ -n \"$FAKE_SECRET_FAIL\" ] && exit 1; cat > \"$FAKE_SECRET_STORE\";;\n"
           "  *) exit 2;;\n"
           "esac\n";
    chmod((dir_ + "/bin/secret-tool").c_str(), 0755);
    setenv("FAKE_SECRET_STORE", (dir_ + "/secret").c_str(), 1);
    unsetenv("FAKE_SECRET_FAIL");
    unsetenv("DBUS_SESSION_BUS_ADDRESS");  // no session bus unless a test says so
  }
  void TearDown() override {
    for (auto& [name, value] : saved_) {
      if (value) setenv(name.c_str(), value->c_str(), 1);
      else unsetenv(name.c_str());
    }
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  void WithSecretService() {
    setenv("PATH", (dir_ + "/bin:" + std::string(getenv("PATH") ? getenv("PATH") : "/usr/bin:/bin")).c_str(), 1);
    setenv("DBUS_SESSION_BUS_ADDRESS", "unix:path=/nonexistent-test-bus", 1);
  }
  std::string Keys() const { return dir_ + "/keys"; }
  std::string KeyFile() const { return Keys() + "/" + kVaultKeyFile; }

  std::string dir_;
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

TEST_F(MasterKeyBackendTest, AutoUsesTheSecretServiceAndWritesNoKeyFile) {
  WithSecretService();
  auto a = LoadOrCreateMasterKey(Keys(), KeyBackend::kAuto);
  ASSERT_TRUE(a.ok()) << a.error().ToString();
  EXPECT_EQ(a->backend, "secret-service");
  EXPECT_EQ(a->bytes.size(), 32u);
  EXPECT_FALSE(fs::exists(KeyFile()));
  // The same key next time, from the service.
  auto b = LoadOrCreateMasterKey(Keys(), KeyBackend::kAuto);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->bytes, a->bytes);
  EXPECT_EQ(b->backend, "secret-service");
}

TEST_F(MasterKeyBackendTest, AnExistingKeyFileWinsAndNoServiceMeansTheFile) {
  auto f = LoadOrCreateMasterKey(Keys(), KeyBackend::kAuto);  // no bus: the file
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->backend, "file");
  EXPECT_TRUE(fs::exists(KeyFile()));
  WithSecretService();
  auto again = LoadOrCreateMasterKey(Keys(), KeyBackend::kAuto);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->backend, "file");
  EXPECT_EQ(again->bytes, f->bytes);
  EXPECT_FALSE(fs::exists(dir_ + "/secret"));
}

TEST_F(MasterKeyBackendTest, AutoFallsBackToTheFileWhenTheServiceRefuses) {
  WithSecretService();
  setenv("FAKE_SECRET_FAIL", "1", 1);
  auto k = LoadOrCreateMasterKey(Keys(), KeyBackend::kAuto);
  ASSERT_TRUE(k.ok()) << k.error().ToString();
  EXPECT_EQ(k->backend, "file");
  EXPECT_TRUE(fs::exists(KeyFile()));
}

TEST_F(MasterKeyBackendTest, AnExplicitSecretServiceThatCannotWorkFailsClosed) {
  auto none = LoadOrCreateMasterKey(Keys(), KeyBackend::kSecretService);  // no bus
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.error().code(), ErrorCode::kUnavailable);
  EXPECT_NE(none.error().hint().find("CLOISTER_VAULT_KEY_BACKEND=file"), std::string::npos);
  EXPECT_FALSE(fs::exists(KeyFile()));
  WithSecretService();
  std::ofstream(dir_ + "/secret") << "not hex";
  auto bad = LoadOrCreateMasterKey(Keys(), KeyBackend::kSecretService);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().code(), ErrorCode::kCorrupt);
  EXPECT_FALSE(fs::exists(KeyFile()));
}

}  // namespace
}  // namespace cloister::vault
