#include "sshagent/ide_keys.h"

#include <sys/stat.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "base/file_util.h"
#include "base/strings.h"
#include "vault/crypto.h"

namespace cloister::sshagent {
namespace {

namespace fs = std::filesystem;

class IdeKeysTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/cloister-idekeys-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }
  static std::string Read(const std::string& p) {
    std::ifstream f(p);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
  }
  static unsigned Mode(const std::string& p) {
    struct stat st{};
    stat(p.c_str(), &st);
    return st.st_mode & 07777;
  }
  std::string dir_;
};

TEST_F(IdeKeysTest, PrivateKeyFileRoundTripsAndHasOpenSshShape) {
  auto key = Ed25519Key::Generate();
  ASSERT_TRUE(key.ok());
  auto text = OpenSshPrivateKey(*key, "c");
  ASSERT_TRUE(text.ok()) << text.error().ToString();
  EXPECT_TRUE(StartsWith(text->str(), "-----BEGIN OPENSSH PRIVATE KEY-----\n"));
  EXPECT_NE(text->str().find("\n-----END OPENSSH PRIVATE KEY-----\n"), std::string::npos);
  for (const std::string& line : Split(text->str(), '\n')) EXPECT_LE(line.size(), 70u);
  auto back = ParseOpenSshPrivateKey(text->view());
  ASSERT_TRUE(back.ok()) << back.error().ToString();
  EXPECT_EQ(back->public_key(), key->public_key());
  auto s1 = key->Seed(), s2 = back->Seed();
  ASSERT_TRUE(s1.ok() && s2.ok());
  EXPECT_EQ(s1->str(), s2->str());
}

TEST_F(IdeKeysTest, DamagedPrivateKeyFilesAreRefused) {
  auto key = Ed25519Key::Generate();
  ASSERT_TRUE(key.ok());
  std::string good = OpenSshPrivateKey(*key, "c")->str();
  EXPECT_FALSE(ParseOpenSshPrivateKey("").ok());
  EXPECT_FALSE(ParseOpenSshPrivateKey("ssh-ed25519 AAAA").ok());
  EXPECT_FALSE(ParseOpenSshPrivateKey(good.substr(0, good.size() / 2)).ok());
  // Every truncation of the decoded blob is refused, never read past.
  std::string body = good.substr(good.find('\n') + 1);
  body = body.substr(0, body.find("-----END"));
  std::string b64;
  for (char c : body) {
    if (c != '\n') b64.push_back(c);
  }
  auto blob = vault::Base64Decode(b64);
  ASSERT_TRUE(blob.ok());
  auto wrap = [](const std::string& raw) {
    return "-----BEGIN OPENSSH PRIVATE KEY-----\n" + vault::Base64Encode(raw) +
           "\n-----END OPENSSH PRIVATE KEY-----\n";
  };
  ASSERT_TRUE(ParseOpenSshPrivateKey(wrap(*blob)).ok());
  for (size_t n = 0; n < blob->size(); n += 7) {
    EXPECT_FALSE(ParseOpenSshPrivateKey(wrap(blob->substr(0, n))).ok()) << n;
  }
  // A different public key in the header than in the private section.
  auto other = Ed25519Key::Generate();
  std::string swapped = *blob;
  size_t at = swapped.find(key->public_key());
  ASSERT_NE(at, std::string::npos);
  swapped.replace(at, 32, other->public_key());
  EXPECT_FALSE(ParseOpenSshPrivateKey(wrap(swapped)).ok());
}

TEST_F(IdeKeysTest, ClientKeyIsMadeOnceWithPrivateModeAndReused) {
  std::string keys = dir_ + "/keys";
  bool created = false;
  auto k1 = LoadOrMakeClientKey(keys, &created);
  ASSERT_TRUE(k1.ok()) << k1.error().ToString();
  EXPECT_TRUE(created);
  EXPECT_EQ(Mode(keys), 0700u);
  EXPECT_EQ(Mode(ClientKeyPath(keys)), 0600u);
  EXPECT_EQ(Read(ClientKeyPath(keys) + ".pub"), k1->AuthorizedKeysLine(kClientKeyComment) + "\n");
  auto k2 = LoadOrMakeClientKey(keys, &created);
  ASSERT_TRUE(k2.ok());
  EXPECT_FALSE(created);
  EXPECT_EQ(k1->public_key(), k2->public_key());
  // No leftover temp files.
  size_t files = 0;
  for (const auto& e : fs::directory_iterator(keys)) {
    (void)e;
    ++files;
  }
  EXPECT_EQ(files, 2u);
}

TEST_F(IdeKeysTest, GuestMaterialCarriesOnlyTheClientPublicKey) {
  std::string keys = dir_ + "/keys", ws = dir_ + "/ws";
  fs::create_directories(ws);
  auto m = SshdGuestMaterialFor(keys, ws);
  ASSERT_TRUE(m.ok()) << m.error().ToString();
  auto client = LoadOrMakeClientKey(keys);
  ASSERT_TRUE(client.ok());
  auto seed = client->Seed();
  ASSERT_TRUE(seed.ok());
  // SECURITY: no form of the client's private seed in what goes to the guest.
  std::string all = m->host_key.str() + m->authorized_keys;
  for (const std::string& form : {seed->str(), HexEncode(seed->str()), vault::Base64Encode(seed->str()),
                                  Read(ClientKeyPath(keys))}) {
    EXPECT_EQ(all.find(form), std::string::npos);
  }
  EXPECT_EQ(m->authorized_keys,
            "restrict,pty,port-forwarding " + client->AuthorizedKeysLine(kClientKeyComment) + "\n");
  auto host = ParseOpenSshPrivateKey(m->host_key.view());
  ASSERT_TRUE(host.ok());
  EXPECT_NE(host->public_key(), client->public_key());
}

TEST_F(IdeKeysTest, PinMatchesUntilTheHostKeyIsReplaced) {
  std::string ws = dir_ + "/ws";
  fs::create_directories(ws);
  EXPECT_EQ(CheckSshdHostPin("ws", ws).error().code(), ErrorCode::kNotFound);
  ASSERT_TRUE(PinSshdHostKey("ws", ws).ok());
  EXPECT_TRUE(CheckSshdHostPin("ws", ws).ok());
  auto host = LoadOrMakeSshdHostKey(ws);
  ASSERT_TRUE(host.ok());
  EXPECT_EQ(Read(KnownHostsPath(ws)), KnownHostsLine("ws", *host) + "\n");
  EXPECT_TRUE(StartsWith(KnownHostsLine("ws", *host), "ws.cloister ssh-ed25519 AAAA"));
  EXPECT_EQ(Mode(ws + "/ssh/" + kSshdHostKeyFile), 0600u);
  // `wipe` replaces the host key: the pin no longer matches, and says how to fix it.
  ASSERT_TRUE(MakeSshdHostKey(ws).ok());
  Status st = CheckSshdHostPin("ws", ws);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error().code(), ErrorCode::kFailedPrecondition);
  EXPECT_NE(st.error().ToString().find("cloister ssh-config ws"), std::string::npos);
  ASSERT_TRUE(PinSshdHostKey("ws", ws).ok());
  EXPECT_TRUE(CheckSshdHostPin("ws", ws).ok());
}

}  // namespace
}  // namespace cloister::sshagent
