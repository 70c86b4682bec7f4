#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "base/strings.h"
#include "cli/cli.h"
#include "cli/testing.h"
#include "sshagent/ed25519_key.h"
#include "sshagent/vault_key_store.h"
#include "store/env.h"
#include "store/store.h"
#include "vault/crypto.h"

namespace cloister::cli {
namespace {

namespace fs = std::filesystem;

using testing::Outcome;

class SshKeygenCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // A real workspace (the verb finds it through the store), made without the CLI's key hook
    // so the verb's first run makes the key.
    ASSERT_EQ(store_.CreateWorkspace("dev"), "");
    setenv("CLOISTER_VAULT_KEY_BACKEND", "file", 1);
  }

  Outcome Run(std::vector<std::string> args) { return store_.Run(args); }

  sshagent::VaultKeyStore Store() {
    return sshagent::VaultKeyStore(
        vault::VaultLocation{root_ + "/keys", root_ + "/workspaces/dev/secrets.enc", "dev"});
  }

  testing::TempStore store_{"sshkeygen"};
  const std::string& root_ = store_.root();
};

TEST_F(SshKeygenCliTest, PrintsAStableKeyAndRegenerates) {
  Outcome first = Run({"ssh-keygen", "dev"});
  ASSERT_EQ(first.code, 0) << first.err;
  EXPECT_TRUE(StartsWith(first.out, "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5")) << first.out;
  EXPECT_TRUE(EndsWith(first.out, " cloister:dev\n")) << first.out;
  EXPECT_NE(first.err.find("made a new SSH key"), std::string::npos);
  Outcome second = Run({"ssh-keygen", "dev"});
  ASSERT_EQ(second.code, 0);
  EXPECT_EQ(second.out, first.out);
  EXPECT_EQ(second.err.find("made a new"), std::string::npos);
  std::ifstream pub(root_ + "/workspaces/dev/ssh/id_ed25519.pub");
  std::stringstream ss;
  ss << pub.rdbuf();
  EXPECT_EQ(ss.str(), first.out);

  // The agent the supervisor would serve holds exactly this key.
  sshagent::VaultKeyStore store = Store();
  auto agent = sshagent::AgentForWorkspace(store, "dev");
  ASSERT_TRUE(agent.ok()) << agent.error().ToString();
  EXPECT_EQ((*agent)->key().AuthorizedKeysLine("cloister:dev") + "\n", first.out);

  Outcome regen = Run({"ssh-keygen", "dev", "--regenerate", "--yes", "--json"});
  ASSERT_EQ(regen.code, 0) << regen.err;
  auto doc = nlohmann::json::parse(regen.out);
  EXPECT_TRUE(doc["created"].get<bool>());
  EXPECT_NE(doc["public_key"].get<std::string>() + "\n", first.out);
  EXPECT_TRUE(StartsWith(doc["fingerprint"].get<std::string>(), "SHA256:"));
  // Without --yes and without a terminal, --regenerate refuses and changes nothing.
  Outcome refused = Run({"ssh-keygen", "dev", "--regenerate"});
  EXPECT_NE(refused.code, 0);
  auto after = nlohmann::json::parse(Run({"ssh-keygen", "dev", "--json"}).out);
  EXPECT_EQ(after["public_key"], doc["public_key"]);
  EXPECT_FALSE(after["created"].get<bool>());
}

TEST_F(SshKeygenCliTest, NoPrivateKeyBytesOutsideTheEncryptedStore) {
  ASSERT_EQ(Run({"ssh-keygen", "dev"}).code, 0);
  ASSERT_EQ(Run({"ssh-keygen", "dev", "--regenerate", "--yes"}).code, 0);
  sshagent::VaultKeyStore store = Store();
  auto seed = store.LoadSeed();
  ASSERT_TRUE(seed.ok() && seed->has_value());
  const std::string& raw = (*seed)->str();
  ASSERT_EQ(raw.size(), 32u);
  std::vector<std::string> needles = {raw, HexEncode(raw), vault::Base64Encode(raw),
                                      vault::Base64Encode(raw, false, false),
                                      vault::Base64Encode(raw, true, false), "OPENSSH PRIVATE KEY",
                                      "PRIVATE KEY"};
  int files = 0;
  bool saw_secrets = false;
  for (const auto& e : fs::recursive_directory_iterator(root_)) {
    if (!e.is_regular_file()) continue;
    ++files;
    std::ifstream f(e.path(), std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    for (const auto& n : needles) {
      EXPECT_EQ(bytes.find(n), std::string::npos) << e.path() << " contains private key material";
    }
    if (e.path().filename() == "secrets.enc") saw_secrets = true;
  }
  EXPECT_TRUE(saw_secrets);
  EXPECT_GE(files, 3);  // secrets.enc, the public key, the vault's key and salt
}

TEST_F(SshKeygenCliTest, UnknownWorkspaceIsAClearError) {
  Outcome o = Run({"ssh-keygen", "nope"});
  EXPECT_NE(o.code, 0);
  EXPECT_NE(o.err.find("no workspace named \'nope\'"), std::string::npos) << o.err;
}

}  // namespace
}  // namespace cloister::cli
