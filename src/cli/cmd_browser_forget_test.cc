// `cloister browser NAME forget` and the CLI's store hook (bprofile, issue #18): forget drops the
// kept browser profile (disk and key) alone; the verbs opened through OpenStore destroy it at
// wipe-home and wipe and keep it at reset.
#include <stdlib.h>

#include <filesystem>

#include <gtest/gtest.h>

#include "browser/profile_disk.h"
#include "cli/testing.h"
#include "vault/vault.h"

namespace cloister::cli {
namespace {

namespace fs = std::filesystem;

class BrowserForgetCliTest : public testing::SparseBaseTest {
 protected:
  void SetUp() override {
    setenv("CLOISTER_VAULT_KEY_BACKEND", "file", 1);
    SparseBaseTest::SetUp();
    auto c = Create("web");
    ASSERT_EQ(c.code, 0) << c.err;
    loc_ = browser::ProfileLocation{store_ + "/keys", store_ + "/workspaces/web", "web"};
  }
  void MakeProfile() {
    auto d = browser::EnsureProfileDisk(loc_, 64ull << 20);
    ASSERT_TRUE(d.ok()) << d.error().ToString();
  }
  bool KeyInVault() {
    auto v = vault::Vault::Open({loc_.keys_dir, loc_.SecretsPath(), "web"});
    return v.ok() && v->FindBlob(browser::kProfileKeyBlob) != nullptr;
  }
  // Another secret of the same vault (the workspace SSH key's seed) must survive forget.
  bool SshSeedInVault() {
    auto v = vault::Vault::Open({loc_.keys_dir, loc_.SecretsPath(), "web"});
    return v.ok() && v->FindBlob("ssh-ed25519") != nullptr;
  }
  browser::ProfileLocation loc_;
};

TEST_F(BrowserForgetCliTest, ForgetDropsDiskAndKeyAndNothingElse) {
  MakeProfile();
  ASSERT_TRUE(fs::exists(loc_.DiskPath()));
  ASSERT_TRUE(KeyInVault());
  bool had_seed = SshSeedInVault();
  auto no = Run({"browser", "web", "forget"});  // stdin is no terminal: refused without --yes
  EXPECT_NE(no.code, 0);
  EXPECT_TRUE(fs::exists(loc_.DiskPath()));
  auto r = Run({"browser", "web", "forget", "--yes"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("forgotten"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(loc_.DiskPath()));
  EXPECT_FALSE(KeyInVault());
  EXPECT_EQ(SshSeedInVault(), had_seed);
  EXPECT_TRUE(fs::exists(store_ + "/workspaces/web/config.json"));
  auto again = Run({"browser", "web", "forget", "--json"});
  ASSERT_EQ(again.code, 0) << again.err;
  EXPECT_EQ(again.json().value("forgotten", true), false) << again.out;
}

// SECURITY property: the CLI's store (OpenStore) destroys the profile's key too at wipe-home and
// wipe (without the hook only the file would go); reset keeps disk and key.
TEST_F(BrowserForgetCliTest, WipeHomeAndWipeThroughTheCliDestroyTheProfileResetKeepsIt) {
  MakeProfile();
  auto reset = Run({"reset", "web", "-f"});
  ASSERT_EQ(reset.code, 0) << reset.err;
  EXPECT_TRUE(fs::exists(loc_.DiskPath()));
  EXPECT_TRUE(KeyInVault());
  auto wh = Run({"wipe-home", "web", "-f"});
  ASSERT_EQ(wh.code, 0) << wh.err;
  EXPECT_FALSE(fs::exists(loc_.DiskPath()));
  EXPECT_FALSE(KeyInVault()) << "wipe-home left the profile key in the vault";
  MakeProfile();
  auto w = Run({"wipe", "web", "-f"});
  ASSERT_EQ(w.code, 0) << w.err;
  EXPECT_FALSE(fs::exists(loc_.DiskPath()));
  EXPECT_FALSE(KeyInVault()) << "wipe left the profile key in the vault";
}

}  // namespace
}  // namespace cloister::cli
