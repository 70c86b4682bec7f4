#include "sshagent/key_store.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

namespace cloister::sshagent {
namespace {

namespace fs = std::filesystem;

class KeyStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/cloister-keystore-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string Read(const fs::path& p) {
    std::ifstream f(p);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
  }
  fs::path dir_;
};

TEST_F(KeyStoreTest, MakeStoresSeedAndWritesOnlyThePublicKey) {
  MemoryKeyStore store;
  std::string pub = (dir_ / "id_ed25519.pub").string();
  auto key = MakeWorkspaceKey(store, "ws1", pub);
  ASSERT_TRUE(key.ok()) << key.error().ToString();
  EXPECT_EQ(store.saves(), 1);
  EXPECT_EQ(Read(pub), key->AuthorizedKeysLine("cloister:ws1") + "\n");
  // The only file is the public key; the seed is nowhere in the directory.
  auto seed = key->Seed();
  ASSERT_TRUE(seed.ok());
  for (const auto& e : fs::recursive_directory_iterator(dir_)) {
    EXPECT_EQ(e.path().filename(), "id_ed25519.pub");
    EXPECT_EQ(Read(e.path()).find(seed->str()), std::string::npos);
  }
  auto loaded = LoadWorkspaceKey(store, "ws1");
  ASSERT_TRUE(loaded.ok());
  EXPECT_EQ(loaded->public_key(), key->public_key());
}

TEST_F(KeyStoreTest, LoadOrMakeKeepsAnExistingKeyAndRegenerateReplacesIt) {
  MemoryKeyStore store;
  EXPECT_EQ(LoadWorkspaceKey(store, "ws").error().code(), ErrorCode::kNotFound);
  bool created = false;
  auto first = LoadOrMakeWorkspaceKey(store, "ws", "", &created);
  ASSERT_TRUE(first.ok());
  EXPECT_TRUE(created);
  auto again = LoadOrMakeWorkspaceKey(store, "ws", "", &created);
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE(created);
  EXPECT_EQ(again->public_key(), first->public_key());
  auto regenerated = MakeWorkspaceKey(store, "ws", "");  // wipe-home
  ASSERT_TRUE(regenerated.ok());
  EXPECT_NE(regenerated->public_key(), first->public_key());
  auto agent = AgentForWorkspace(store, "ws");
  ASSERT_TRUE(agent.ok());
  EXPECT_EQ((*agent)->key().public_key(), regenerated->public_key());
  EXPECT_EQ((*agent)->comment(), "cloister:ws");
}

TEST_F(KeyStoreTest, DamagedSeedIsAnError) {
  MemoryKeyStore store;
  ASSERT_TRUE(store.SaveSeed("short").ok());
  auto key = LoadWorkspaceKey(store, "ws");
  ASSERT_FALSE(key.ok());
  EXPECT_NE(key.error().message().find("damaged"), std::string::npos);
}

}  // namespace
}  // namespace cloister::sshagent
