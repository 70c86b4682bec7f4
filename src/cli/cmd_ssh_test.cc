// The workspace SSH key's lifecycle through the real verbs (create makes it, ssh-keygen shows it,
// wipe-home and wipe regenerate it, rm deletes it), and `ssh-policy`. In-process, temp store.
#include <algorithm>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "base/strings.h"
#include "base/testing_file.h"
#include "cli/cli.h"
#include "cli/testing.h"
#include "sshagent/ed25519_key.h"
#include "sshagent/host_key.h"
#include "sshagent/policy.h"
#include "sshagent/vault_key_store.h"
#include "store/env.h"
#include "store/store.h"
#include "vault/crypto.h"

namespace cloister::cli {
namespace {

namespace fs = std::filesystem;

using testing::Outcome;

using testfile::Slurp;

class SshCliTest : public testing::SparseBaseTest {
 protected:
  SshCliTest() : SparseBaseTest("/tmp/cloister-ssh-cli.") {}
  void SetUp() override {
    SparseBaseTest::SetUp();
    setenv("CLOISTER_VAULT_KEY_BACKEND", "file", 1);
  }

  std::string WsDir(const std::string& name) { return store_ + "/workspaces/" + name; }

  // The 32-byte seed in the workspace's encrypted secrets file.
  std::string Seed(const std::string& name) {
    sshagent::VaultKeyStore ks(
        vault::VaultLocation{store_ + "/keys", WsDir(name) + "/secrets.enc", name});
    auto seed = ks.LoadSeed();
    EXPECT_TRUE(seed.ok());
    if (!seed.ok() || !seed->has_value()) return "";
    return (*seed)->str();
  }

  // The public key line the seed gives (what the agent would serve).
  std::string LineOfSeed(const std::string& name, const std::string& seed) {
    auto key = sshagent::Ed25519Key::FromSeed(seed);
    EXPECT_TRUE(key.ok());
    return key.ok() ? key->AuthorizedKeysLine("cloister:" + name) + "\n" : "";
  }

  // Every file of the store, scanned for the seed in raw, hex and base64 forms.
  void ExpectSeedNowhere(const std::string& seed) {
    std::vector<std::string> needles = {seed, HexEncode(seed), vault::Base64Encode(seed),
                                        vault::Base64Encode(seed, false, false),
                                        vault::Base64Encode(seed, true, false)};
    for (const auto& e : fs::recursive_directory_iterator(store_)) {
      if (!e.is_regular_file()) continue;
      std::string bytes = Slurp(e.path());
      for (const auto& n : needles) {
        EXPECT_EQ(bytes.find(n), std::string::npos) << e.path() << " holds the old key's seed";
      }
    }
  }

};

TEST_F(SshCliTest, CreateMakesTheKeyWipesRegenerateItRmDeletesIt) {
  Outcome c = Create("dev");
  ASSERT_EQ(c.code, 0) << c.err;
  // create made the key: the seed is in secrets.enc, only the public key is a file.
  std::string seed1 = Seed("dev");
  ASSERT_EQ(seed1.size(), 32u);
  std::string pub1 = Slurp(WsDir("dev") + "/ssh/id_ed25519.pub");
  EXPECT_EQ(pub1, LineOfSeed("dev", seed1));
  // Beside it only the guest sshd's host key pair (sshagent/ide_keys.h: it can impersonate only
  // this guest), never the agent key's private part.
  std::vector<std::string> files;
  for (auto& e : fs::directory_iterator(WsDir("dev") + "/ssh")) files.push_back(e.path().filename());
  std::sort(files.begin(), files.end());
  EXPECT_EQ(files, (std::vector<std::string>{"id_ed25519.pub", "sshd_host_ed25519_key",
                                             "sshd_host_ed25519_key.pub"}));
  EXPECT_NE(Slurp(WsDir("dev") + "/ssh/sshd_host_ed25519_key.pub"), pub1);
  // ssh-keygen shows that key and makes none.
  Outcome k = Run({"ssh-keygen", "dev", "--json"});
  ASSERT_EQ(k.code, 0) << k.err;
  EXPECT_EQ(k.json()["public_key"].get<std::string>() + "\n", pub1);
  EXPECT_FALSE(k.json()["created"].get<bool>());

  // wipe-home: a new key; the old seed is gone from every file of the store.
  Outcome wh = Run({"wipe-home", "dev", "--yes"});
  ASSERT_EQ(wh.code, 0) << wh.err;
  EXPECT_NE(wh.out.find("regenerated its keypair"), std::string::npos) << wh.out;
  std::string seed2 = Seed("dev");
  ASSERT_EQ(seed2.size(), 32u);
  EXPECT_NE(seed2, seed1);
  std::string pub2 = Slurp(WsDir("dev") + "/ssh/id_ed25519.pub");
  EXPECT_EQ(pub2, LineOfSeed("dev", seed2));
  EXPECT_NE(pub2, pub1);
  EXPECT_EQ(Run({"ssh-keygen", "dev"}).out, pub2);
  ExpectSeedNowhere(seed1);

  // wipe: a new key again (with the compromised flag cleared).
  Outcome w = Run({"wipe", "dev", "--yes"});
  ASSERT_EQ(w.code, 0) << w.err;
  EXPECT_NE(w.out.find("new SSH key"), std::string::npos) << w.out;
  std::string seed3 = Seed("dev");
  ASSERT_EQ(seed3.size(), 32u);
  EXPECT_NE(seed3, seed2);
  EXPECT_EQ(Slurp(WsDir("dev") + "/ssh/id_ed25519.pub"), LineOfSeed("dev", seed3));
  ExpectSeedNowhere(seed2);

  // A second workspace has a key of its own.
  ASSERT_EQ(Create("other").code, 0);
  std::string other = Seed("other");
  ASSERT_EQ(other.size(), 32u);
  EXPECT_NE(other, seed3);

  // rm: the secrets file, the public key and the directory go; the seed is nowhere; the other
  // workspace keeps its key.
  Outcome rm = Run({"rm", "dev", "--yes"});
  ASSERT_EQ(rm.code, 0) << rm.err;
  EXPECT_FALSE(fs::exists(WsDir("dev")));
  ExpectSeedNowhere(seed3);
  EXPECT_EQ(Seed("other"), other);
  Outcome gone = Run({"ssh-keygen", "dev"});
  EXPECT_NE(gone.code, 0);
  EXPECT_NE(gone.err.find("no workspace named 'dev'"), std::string::npos) << gone.err;
}

TEST_F(SshCliTest, SshPolicyShowsChangesAndValidates) {
  ASSERT_EQ(Create("dev").code, 0);
  Outcome show = Run({"ssh-policy", "dev"});
  ASSERT_EQ(show.code, 0) << show.err;
  EXPECT_NE(show.out.find("confirm each signature: off"), std::string::npos) << show.out;
  EXPECT_NE(show.out.find("ssh tunnel hosts: github.com, gitlab.com, bitbucket.org"), std::string::npos);
  EXPECT_NE(show.out.find("ssh tunnel ports: 22"), std::string::npos);

  Outcome set = Run({"ssh-policy", "dev", "--confirm", "on", "--add-host", "Git.Example.TEST",
                     "--remove-host", "bitbucket.org", "--ports", "22,2222", "--json"});
  ASSERT_EQ(set.code, 0) << set.err;
  nlohmann::json j = set.json();
  EXPECT_EQ(j["confirm"], true);
  EXPECT_EQ(j["tunnel_hosts"], nlohmann::json({"github.com", "gitlab.com", "git.example.test"}));
  EXPECT_EQ(j["tunnel_ports"], nlohmann::json({22, 2222}));
  EXPECT_EQ(j["applies_at_next_start"], false);  // stopped

  // Stored in config.json where the supervisor reads it at the next boot.
  auto store = Store::Open(store_);
  ASSERT_TRUE(store.ok());
  auto cfg = (*store)->LoadConfig("dev");
  ASSERT_TRUE(cfg.ok());
  auto policy = sshagent::SshPolicyFromConfig(*cfg);
  ASSERT_TRUE(policy.ok());
  EXPECT_TRUE(policy->confirm);
  EXPECT_EQ(policy->tunnel_ports, (std::vector<uint16_t>{22, 2222}));
  EXPECT_EQ(sshagent::SshPolicyToJson(*policy), (nlohmann::json{{"confirm", true},
                                                                  {"tunnel_hosts", j["tunnel_hosts"]},
                                                                  {"tunnel_ports", j["tunnel_ports"]}}));

  // Refusals change nothing: port 443, a wildcard, removing a host that is not there.
  for (std::vector<std::string> bad : {std::vector<std::string>{"ssh-policy", "dev", "--ports", "22,443"},
                                       {"ssh-policy", "dev", "--ports", "22,x"},
                                       {"ssh-policy", "dev", "--add-host", "*.example.test"},
                                       {"ssh-policy", "dev", "--remove-host", "nothere.test"},
                                       {"ssh-policy", "dev", "--confirm", "maybe"}}) {
    Outcome o = Run(bad);
    EXPECT_NE(o.code, 0) << Join(bad, " ");
    EXPECT_FALSE(o.err.empty());
  }
  EXPECT_EQ(Run({"ssh-policy", "dev", "--json"}).json(), j);

  // --no-hosts turns ssh out of the guest off; --reset brings the defaults back.
  Outcome none = Run({"ssh-policy", "dev", "--no-hosts"});
  ASSERT_EQ(none.code, 0);
  EXPECT_NE(none.out.find("(none: ssh out of the guest is off)"), std::string::npos) << none.out;
  Outcome reset = Run({"ssh-policy", "dev", "--reset", "--json"});
  ASSERT_EQ(reset.code, 0);
  EXPECT_EQ(reset.json()["confirm"], false);
  EXPECT_EQ(reset.json()["tunnel_hosts"], nlohmann::json(sshagent::DefaultTunnelHosts()));

  // A damaged policy is reported (never silently defaulted) and --reset repairs it.
  ASSERT_TRUE((*store)->UpdateConfig("dev", [](WorkspaceConfig& c) {
    c.extra["ssh"] = {{"tunnel_ports", {443}}};
    return OkStatus();
  }).ok());
  Outcome damaged = Run({"ssh-policy", "dev"});
  EXPECT_NE(damaged.code, 0);
  EXPECT_NE(damaged.err.find("--reset"), std::string::npos) << damaged.err;
  EXPECT_EQ(Run({"ssh-policy", "dev", "--reset"}).code, 0);
  EXPECT_EQ(Run({"ssh-policy", "dev"}).code, 0);

  Outcome unknown = Run({"ssh-policy", "nope"});
  EXPECT_NE(unknown.code, 0);
}

// Issue 15 item 10: pinned host keys are shown and resettable with `cloister ssh-policy`.
TEST_F(SshCliTest, SshPolicyShowsAndForgetsPinnedHostKeys) {
  ASSERT_EQ(Create("dev").code, 0);
  Outcome none = Run({"ssh-policy", "dev"});
  ASSERT_EQ(none.code, 0) << none.err;
  EXPECT_NE(none.out.find("pinned host keys: (none yet"), std::string::npos) << none.out;
  // The supervisor pins on first use; here the pins are written as it writes them.
  auto k1 = sshagent::Ed25519Key::Generate();
  auto k2 = sshagent::Ed25519Key::Generate();
  ASSERT_TRUE(k1.ok() && k2.ok());
  std::string line1 = *sshagent::HostKeyLine(k1->PublicKeyBlob());
  std::string line2 = *sshagent::HostKeyLine(k2->PublicKeyBlob());
  auto store = Store::Open(store_);
  ASSERT_TRUE(store.ok());
  ASSERT_TRUE((*store)->UpdateConfig("dev", [&](WorkspaceConfig& c) -> Status {
    sshagent::SshPolicy p;
    p.host_keys["github.com"] = {line1};
    p.host_keys["gitlab.com"] = {line2};
    return sshagent::PutSshPolicy(c, p);
  }).ok());
  Outcome show = Run({"ssh-policy", "dev"});
  ASSERT_EQ(show.code, 0) << show.err;
  EXPECT_NE(show.out.find("  github.com  ssh-ed25519 " + k1->Fingerprint()), std::string::npos) << show.out;
  EXPECT_NE(show.out.find("  gitlab.com  ssh-ed25519 " + k2->Fingerprint()), std::string::npos) << show.out;
  nlohmann::json j = Run({"ssh-policy", "dev", "--json"}).json();
  EXPECT_EQ(j["host_keys"]["github.com"][0]["key"], line1);
  EXPECT_EQ(j["host_keys"]["github.com"][0]["fingerprint"], k1->Fingerprint());
  // --unpin forgets one host's keys; again is an error that says so.
  Outcome unpin = Run({"ssh-policy", "dev", "--unpin", "GitHub.com", "--json"});
  ASSERT_EQ(unpin.code, 0) << unpin.err;
  EXPECT_FALSE(unpin.json()["host_keys"].contains("github.com"));
  EXPECT_TRUE(unpin.json()["host_keys"].contains("gitlab.com"));
  Outcome again = Run({"ssh-policy", "dev", "--unpin", "github.com"});
  EXPECT_NE(again.code, 0);
  EXPECT_NE(again.err.find("github.com has no pinned host key"), std::string::npos) << again.err;
  auto cfg = (*store)->LoadConfig("dev");
  ASSERT_TRUE(cfg.ok());
  auto stored = sshagent::SshPolicyFromConfig(*cfg);
  ASSERT_TRUE(stored.ok());
  EXPECT_EQ(stored->host_keys.count("github.com"), 0u);
  // Removing a host forgets its pins; --reset forgets them all.
  ASSERT_EQ(Run({"ssh-policy", "dev", "--remove-host", "gitlab.com"}).code, 0);
  cfg = (*store)->LoadConfig("dev");
  EXPECT_TRUE(sshagent::SshPolicyFromConfig(*cfg)->host_keys.empty());
  // A pin for a host outside the policy, or a malformed key, is a damaged policy (fail closed).
  ASSERT_TRUE((*store)->UpdateConfig("dev", [&](WorkspaceConfig& c) {
    c.extra["ssh"] = {{"host_keys", {{"evil.example", {line1}}}}};
    return OkStatus();
  }).ok());
  EXPECT_NE(Run({"ssh-policy", "dev"}).code, 0);
  ASSERT_TRUE((*store)->UpdateConfig("dev", [&](WorkspaceConfig& c) {
    c.extra["ssh"] = {{"host_keys", {{"github.com", {"ssh-ed25519 AAAA"}}}}};
    return OkStatus();
  }).ok());
  EXPECT_NE(Run({"ssh-policy", "dev"}).code, 0);
  EXPECT_EQ(Run({"ssh-policy", "dev", "--reset"}).code, 0);
}

TEST_F(SshCliTest, SshConfirmNeedsARunningWorkspace) {
  ASSERT_EQ(Create("dev").code, 0);
  Outcome o = Run({"ssh-confirm", "dev"});
  EXPECT_NE(o.code, 0);
  EXPECT_NE(o.err.find("dev is not running"), std::string::npos) << o.err;
  EXPECT_NE(o.err.find("cloister start dev"), std::string::npos) << o.err;
  for (const char* verb : {"ssh-confirm", "ssh-policy"}) {
    Outcome h = Run({verb, "--help"});
    EXPECT_EQ(h.code, 0);
    EXPECT_NE(h.out.find(std::string("Usage: cloister ") + verb), std::string::npos) << h.out;
  }
}

}  // namespace
}  // namespace cloister::cli
