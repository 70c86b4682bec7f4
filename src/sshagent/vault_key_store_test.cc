#include "sshagent/vault_key_store.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>

namespace cloister::sshagent {
namespace {

TEST(VaultKeyStoreTest, SeedSurvivesOtherVaultWritesAndHookWritesPublicKey) {
  setenv("CLOISTER_VAULT_KEY_BACKEND", "file", 1);
  char tmpl[] = "/tmp/cloister-vks-XXXXXX";
  std::string root = mkdtemp(tmpl);
  std::filesystem::create_directories(root + "/ws");
  vault::VaultLocation loc{root + "/keys", root + "/ws/secrets.enc", "ws"};
  auto hook = MakeWorkspaceKeyHook(root + "/keys");
  ASSERT_TRUE(hook("ws", root + "/ws").ok());
  EXPECT_TRUE(std::filesystem::exists(root + "/ws/ssh/id_ed25519.pub"));
  VaultKeyStore store(loc, vault::KeyBackend::kFile);
  auto key = LoadWorkspaceKey(store, "ws");
  ASSERT_TRUE(key.ok()) << key.error().ToString();
  {
    // `cred add` opens, changes and saves the vault: the SSH key must survive it.
    auto v = vault::Vault::Open(loc, vault::KeyBackend::kFile);
    ASSERT_TRUE(v.ok());
    auto cred = vault::MakeCredential(vault::CredentialKind::kAnthropic,
                                      "sk-ant-api03-abcdefghijklmnopqrstuvwxyz0123456789", {}, "", false);
    ASSERT_TRUE(cred.ok());
    v->Put(std::move(cred).value());
    ASSERT_TRUE(v->Save().ok());
  }
  auto again = LoadWorkspaceKey(store, "ws");
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->public_key(), key->public_key());
  // wipe-home: the hook again makes a different key.
  ASSERT_TRUE(hook("ws", root + "/ws").ok());
  auto regenerated = LoadWorkspaceKey(store, "ws");
  ASSERT_TRUE(regenerated.ok());
  EXPECT_NE(regenerated->public_key(), key->public_key());
  // The secrets file of another workspace name does not open (AEAD associated data).
  VaultKeyStore other(vault::VaultLocation{root + "/keys", root + "/ws/secrets.enc", "other"},
                      vault::KeyBackend::kFile);
  EXPECT_FALSE(other.LoadSeed().ok());
  std::filesystem::remove_all(root);
}

}  // namespace
}  // namespace cloister::sshagent
