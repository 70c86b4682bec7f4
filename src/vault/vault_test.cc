#include "vault/vault.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <iterator>

#include "vault/crypto.h"
#include "vault/guest_files.h"
#include "vault/placeholder.h"

namespace cloister::vault {
namespace {

class VaultTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/cloister-vault-XXXXXX";
    dir_ = mkdtemp(tmpl);
    std::filesystem::create_directories(dir_ + "/ws");
    loc_ = {dir_ + "/keys", dir_ + "/ws/secrets.enc", "ws"};
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string Slurp(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(f), {});
  }

  std::string dir_;
  VaultLocation loc_;
  const std::string real_ = "sk-ant-api03-REALREALREALsecretvalue0123456789abcdefAA";
};

TEST_F(VaultTest, SaveOpenRoundTripEncryptedAtRest) {
  {
    auto v = Vault::Open(loc_, KeyBackend::kFile);
    ASSERT_TRUE(v.ok()) << v.error().ToString();
    EXPECT_EQ(v->key_backend(), "file");
    v->Put(*MakeCredential(CredentialKind::kAnthropic, real_, {}, "", false));
    v->Put(*MakeCredential(CredentialKind::kHeader, "tok-123456789", {"x.test"}, "X-Key", true));
    v->set_llm_body_policy(LlmBodyPolicy::kBlock);
    ASSERT_TRUE(v->Save().ok());
  }
  std::string raw = Slurp(loc_.secrets_file);
  EXPECT_EQ(raw.find("REALREAL"), std::string::npos);
  EXPECT_EQ(raw.find("anthropic"), std::string::npos);
  struct stat st;
  ASSERT_EQ(stat(loc_.secrets_file.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  ASSERT_EQ(stat((loc_.keys_dir + "/vault.key").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  ASSERT_EQ(stat(loc_.keys_dir.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);

  auto v = Vault::Open(loc_, KeyBackend::kFile);
  ASSERT_TRUE(v.ok());
  ASSERT_EQ(v->credentials().size(), 2u);
  const Credential* a = v->Find("anthropic");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->value, real_);
  const Credential* h = v->Find("header:x-key");
  ASSERT_NE(h, nullptr);
  EXPECT_TRUE(h->body_substitution);
  EXPECT_EQ(h->hosts, std::vector<std::string>{"x.test"});
  EXPECT_EQ(v->llm_body_policy(), LlmBodyPolicy::kBlock);
}

TEST_F(VaultTest, PlaceholdersStableAcrossOpens) {
  std::string first;
  {
    auto v = Vault::Open(loc_, KeyBackend::kFile);
    ASSERT_TRUE(v.ok());
    v->Put(*MakeCredential(CredentialKind::kAnthropic, real_, {}, "", false));
    auto bound = v->Bind();
    ASSERT_TRUE(bound.ok());
    first = (*bound)[0].placeholder;
    ASSERT_TRUE(v->Save().ok());
  }
  auto v = Vault::Open(loc_, KeyBackend::kFile);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ((*v->Bind())[0].placeholder, first);
}

TEST_F(VaultTest, FileFromAnotherWorkspaceDoesNotOpen) {
  {
    auto v = Vault::Open(loc_, KeyBackend::kFile);
    v->Put(*MakeCredential(CredentialKind::kAnthropic, real_, {}, "", false));
    ASSERT_TRUE(v->Save().ok());
  }
  VaultLocation other = loc_;
  other.workspace = "other";
  auto v = Vault::Open(other, KeyBackend::kFile);
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.error().code(), ErrorCode::kCorrupt);
}

TEST_F(VaultTest, TamperedFileIsCorrupt) {
  {
    auto v = Vault::Open(loc_, KeyBackend::kFile);
    v->Put(*MakeCredential(CredentialKind::kAnthropic, real_, {}, "", false));
    ASSERT_TRUE(v->Save().ok());
  }
  std::string raw = Slurp(loc_.secrets_file);
  raw[raw.size() - 20] ^= 0x40;
  std::ofstream(loc_.secrets_file, std::ios::binary | std::ios::trunc) << raw;
  auto v = Vault::Open(loc_, KeyBackend::kFile);
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.error().code(), ErrorCode::kCorrupt);
}

TEST_F(VaultTest, RefusesKeyFileReadableByOthers) {
  ASSERT_TRUE(Vault::Open(loc_, KeyBackend::kFile).ok());
  chmod((loc_.keys_dir + "/vault.key").c_str(), 0644);
  auto v = Vault::Open(loc_, KeyBackend::kFile);
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.error().code(), ErrorCode::kPermissionDenied);
}

TEST_F(VaultTest, BlobsRoundTripEncrypted) {
  const std::string seed("\x01\x02SEEDSEEDSEEDSEEDSEEDSEEDSEEDS\xff", 32);
  {
    auto v = Vault::Open(loc_, KeyBackend::kFile);
    ASSERT_TRUE(v.ok());
    EXPECT_EQ(v->FindBlob("ssh-ed25519"), nullptr);
    v->PutBlob("ssh-ed25519", seed);
    ASSERT_TRUE(v->Save().ok());
  }
  EXPECT_EQ(Slurp(loc_.secrets_file).find("SEEDSEED"), std::string::npos);
  auto v = Vault::Open(loc_, KeyBackend::kFile);
  ASSERT_TRUE(v.ok());
  ASSERT_NE(v->FindBlob("ssh-ed25519"), nullptr);
  EXPECT_EQ(*v->FindBlob("ssh-ed25519"), seed);
  EXPECT_TRUE(v->RemoveBlob("ssh-ed25519").ok());
  EXPECT_EQ(v->RemoveBlob("ssh-ed25519").error().code(), ErrorCode::kNotFound);
}

TEST_F(VaultTest, RemoveUnknownIsNotFound) {
  auto v = Vault::Open(loc_, KeyBackend::kFile);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->Remove("github").error().code(), ErrorCode::kNotFound);
  v->Put(*MakeCredential(CredentialKind::kGithub, "ghp_" + std::string(36, 'a'), {}, "", false));
  EXPECT_TRUE(v->Remove("github").ok());
  EXPECT_TRUE(v->credentials().empty());
}

TEST_F(VaultTest, GuestFilesHoldOnlyPlaceholders) {
  auto v = Vault::Open(loc_, KeyBackend::kFile);
  ASSERT_TRUE(v.ok());
  std::string gh_real = "ghp_" + std::string(36, 'R');
  v->Put(*MakeCredential(CredentialKind::kAnthropic, real_, {}, "", false));
  v->Put(*MakeCredential(CredentialKind::kGithub, gh_real, {}, "", false));
  auto bound = v->Bind();
  ASSERT_TRUE(bound.ok());
  GuestCredentials g = BuildGuestCredentials(*bound);
  std::string gh_ph = *v->PlaceholderFor(*v->Find("github"));
  EXPECT_EQ(g.env.at("ANTHROPIC_API_KEY"), *v->PlaceholderFor(*v->Find("anthropic")));
  EXPECT_EQ(g.env.at("GH_TOKEN"), gh_ph);
  // git uses the credentials file through the store helper, configured by the environment.
  EXPECT_EQ(g.env.at("GIT_CONFIG_COUNT"), "1");
  EXPECT_EQ(g.env.at("GIT_CONFIG_KEY_0"), "credential.helper");
  EXPECT_EQ(g.env.at("GIT_CONFIG_VALUE_0"), "store");
  ASSERT_EQ(g.files.size(), 2u);
  EXPECT_EQ(g.files[0].path, ".git-credentials");
  EXPECT_NE(g.files[0].content.find("https://x-access-token:" + gh_ph + "@github.com"),
            std::string::npos);
  EXPECT_EQ(g.files[1].path, ".config/gh/hosts.yml");
  EXPECT_NE(g.files[1].content.find("oauth_token: " + gh_ph), std::string::npos);
  for (const auto& [k, val] : g.env) EXPECT_EQ(val.find("REAL"), std::string::npos);
  for (const GuestFile& f : g.files) {
    EXPECT_EQ(f.content.find(gh_real), std::string::npos);
    EXPECT_EQ(f.content.find("REALREAL"), std::string::npos);
  }
}

}  // namespace
}  // namespace cloister::vault

namespace cloister::vault {
namespace {

const char kAwsKeyId[] = "ASIACLOISTERTEST0001";
const char kAwsSecret[] = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYREALSECRET";
const char kAwsToken[] = "IQoJb3JpZ2luX2VjEREALsessionTOKENabcdefghijklmnop+/0123456789==";

TEST_F(VaultTest, AwsCredentialRoundTripAndGuestEnv) {
  {
    auto v = Vault::Open(loc_, KeyBackend::kFile);
    ASSERT_TRUE(v.ok());
    auto c = MakeAwsCredential(kAwsKeyId, kAwsSecret, kAwsToken, "eu-west-1", {});
    ASSERT_TRUE(c.ok()) << c.error().ToString();
    EXPECT_EQ(c->id, "aws");
    EXPECT_EQ(c->hosts, std::vector<std::string>{"amazonaws.com"});
    v->Put(*c);
    ASSERT_TRUE(v->Save().ok());
  }
  std::string raw = Slurp(loc_.secrets_file);
  EXPECT_EQ(raw.find("REALSECRET"), std::string::npos);
  EXPECT_EQ(raw.find("REALsession"), std::string::npos);

  auto v = Vault::Open(loc_, KeyBackend::kFile);
  ASSERT_TRUE(v.ok()) << v.error().ToString();
  const Credential* c = v->Find("aws");
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->kind, CredentialKind::kAws);
  EXPECT_EQ(c->value, kAwsSecret);
  EXPECT_EQ(c->aws_access_key_id, kAwsKeyId);
  EXPECT_EQ(c->aws_session_token, kAwsToken);
  EXPECT_EQ(c->aws_region, "eu-west-1");

  auto bound = v->Bind();
  ASSERT_TRUE(bound.ok());
  ASSERT_EQ(bound->size(), 1u);
  const BoundCredential& b = (*bound)[0];
  // Placeholders keep the shape (length) but share nothing with the secret or the token, and the
  // token's placeholder is its own (not the secret's).
  EXPECT_EQ(b.placeholder.size(), std::string(kAwsSecret).size());
  EXPECT_EQ(b.aws_token_placeholder.size(), std::string(kAwsToken).size());
  EXPECT_NE(b.placeholder, kAwsSecret);
  EXPECT_NE(b.aws_token_placeholder, kAwsToken);
  EXPECT_EQ(b.aws_token_placeholder.find("REAL"), std::string::npos);
  EXPECT_NE(b.placeholder, b.aws_token_placeholder);
  // Stable across opens.
  auto again = Vault::Open(loc_, KeyBackend::kFile)->Bind();
  EXPECT_EQ((*again)[0].aws_token_placeholder, b.aws_token_placeholder);

  GuestCredentials g = BuildGuestCredentials(*bound);
  EXPECT_EQ(g.env["AWS_ACCESS_KEY_ID"], kAwsKeyId);
  EXPECT_EQ(g.env["AWS_SECRET_ACCESS_KEY"], b.placeholder);
  EXPECT_EQ(g.env["AWS_SESSION_TOKEN"], b.aws_token_placeholder);
  EXPECT_EQ(g.env["AWS_REGION"], "eu-west-1");
  EXPECT_EQ(g.env["AWS_DEFAULT_REGION"], "eu-west-1");
  for (const auto& [k, val] : g.env) {
    EXPECT_EQ(val.find("REAL"), std::string::npos) << k;
  }
  EXPECT_TRUE(g.files.empty());
}

TEST(AwsCredentialTest, ValidationErrorsNeverEchoSecrets) {
  auto bad_id = MakeAwsCredential("AKIA-NOT-VALID!!", kAwsSecret, "", "", {});
  ASSERT_FALSE(bad_id.ok());
  EXPECT_EQ(bad_id.error().code(), ErrorCode::kInvalidArgument);
  EXPECT_FALSE(MakeAwsCredential("AKIASHORT", kAwsSecret, "", "", {}).ok());
  auto short_secret = MakeAwsCredential(kAwsKeyId, "short", "", "", {});
  ASSERT_FALSE(short_secret.ok());
  auto bad_token = MakeAwsCredential(kAwsKeyId, kAwsSecret, "token with spaces SECRETTOKEN", "", {});
  ASSERT_FALSE(bad_token.ok());
  EXPECT_EQ(bad_token.error().ToString().find("SECRETTOKEN"), std::string::npos);
  auto spaced = MakeAwsCredential(kAwsKeyId, "wJalrXUtnFEMI K7MDENG", "", "", {});
  ASSERT_FALSE(spaced.ok());
  EXPECT_EQ(spaced.error().ToString().find("K7MDENG"), std::string::npos);
  EXPECT_FALSE(MakeAwsCredential(kAwsKeyId, kAwsSecret, "", "EU_WEST_1", {}).ok());
  // Trailing newlines (stdin) are stripped; a custom scope replaces the default.
  auto ok = MakeAwsCredential(std::string(kAwsKeyId) + "\n", std::string(kAwsSecret) + "\r\n", "", "",
                              {"s3.eu-west-1.amazonaws.com"});
  ASSERT_TRUE(ok.ok()) << ok.error().ToString();
  EXPECT_EQ(ok->value, kAwsSecret);
  EXPECT_EQ(ok->aws_access_key_id, kAwsKeyId);
  EXPECT_EQ(ok->hosts, std::vector<std::string>{"s3.eu-west-1.amazonaws.com"});
  EXPECT_EQ(*ParseKind("aws"), CredentialKind::kAws);
  EXPECT_TRUE(InfoFor(CredentialKind::kAws).headers.empty());
}

}  // namespace
}  // namespace cloister::vault

namespace cloister::vault {
namespace {

// The ask-before-use policy is a field of the credential in the encrypted file; one that does
// not parse fails the open (never silently "off": consent would be skipped).
TEST_F(VaultTest, AskPolicyRoundTripsAndAMalformedOneFailsClosed) {
  {
    auto v = Vault::Open(loc_, KeyBackend::kFile);
    ASSERT_TRUE(v.ok());
    auto c = MakeCredential(CredentialKind::kAnthropic, real_, {}, "", false);
    ASSERT_TRUE(c.ok());
    c->ask = ConsentAsk::kAlways;
    v->Put(*c);
    ASSERT_TRUE(v->Save().ok());
  }
  auto v = Vault::Open(loc_, KeyBackend::kFile);
  ASSERT_TRUE(v.ok());
  ASSERT_NE(v->Find("anthropic"), nullptr);
  EXPECT_EQ(v->Find("anthropic")->ask, ConsentAsk::kAlways);
  // Re-seal the same plaintext with "ask":"sometimes" (the file's own key and framing).
  std::string key = Slurp(dir_ + "/keys/vault.key");
  ASSERT_EQ(key.size(), 32u);
  const std::string magic = "cloister-secrets-v1\n";
  std::string file = Slurp(loc_.secrets_file);
  auto plain = AeadOpen(key, magic + "ws", file.substr(magic.size()));
  ASSERT_TRUE(plain.ok()) << plain.error().ToString();
  size_t at = plain->find("\"ask\":\"always\"");
  ASSERT_NE(at, std::string::npos) << *plain;
  std::string bad = plain->replace(at, 14, "\"ask\":\"sometimes\"");
  auto sealed = AeadSeal(key, magic + "ws", bad);
  ASSERT_TRUE(sealed.ok());
  std::ofstream(loc_.secrets_file, std::ios::binary | std::ios::trunc) << magic << *sealed;
  auto reopened = Vault::Open(loc_, KeyBackend::kFile);
  ASSERT_FALSE(reopened.ok());
  EXPECT_NE(reopened.error().message().find("--ask must be once, always or off"), std::string::npos)
      << reopened.error().ToString();
}

// SECURITY (issue 37 item 1): a credential's policy (ask, allow_paths) is changed by SetPolicy
// only. Every writer that replaces the credential with a new value (`cred add` of a rotated key,
// `cred import` again, a login captured in the guest, a refresh: all go through Put) keeps it, and
// it survives the file (a restart of the supervisor opens the vault again).
TEST_F(VaultTest, PutKeepsThePolicyAndOnlySetPolicyChangesIt) {
  {
    auto v = Vault::Open(loc_, KeyBackend::kFile);
    ASSERT_TRUE(v.ok());
    OauthLogin login;
    login.refresh_token = "sk-ant-ort01-" + std::string(95, 'r');
    auto c = MakeOauthCredential(CredentialKind::kClaudeSubscription,
                                 "sk-ant-oat01-" + std::string(95, 'a'), login, {});
    ASSERT_TRUE(c.ok()) << c.error().ToString();
    v->Put(*c);
    ASSERT_TRUE(v->SetPolicy("claude-subscription", ConsentAsk::kAlways, {"/v1/files"}).ok());
    EXPECT_EQ(v->SetPolicy("nothing", ConsentAsk::kOnce, {}).error().code(), ErrorCode::kNotFound);
    // A new login of the same kind (what import, capture and refresh write): ask off, no paths.
    login.refresh_token = "sk-ant-ort01-" + std::string(95, 's');
    auto fresh = MakeOauthCredential(CredentialKind::kClaudeSubscription,
                                     "sk-ant-oat01-" + std::string(95, 'b'), login, {});
    ASSERT_TRUE(fresh.ok());
    ASSERT_EQ(fresh->ask, ConsentAsk::kOff);
    v->Put(*fresh);
    EXPECT_EQ(v->Find("claude-subscription")->ask, ConsentAsk::kAlways);
    EXPECT_EQ(v->Find("claude-subscription")->allow_paths, std::vector<std::string>{"/v1/files"});
    EXPECT_EQ(v->Find("claude-subscription")->value, "sk-ant-oat01-" + std::string(95, 'b'));
    ASSERT_TRUE(v->Save().ok());
  }
  auto v = Vault::Open(loc_, KeyBackend::kFile);
  ASSERT_TRUE(v.ok());
  ASSERT_NE(v->Find("claude-subscription"), nullptr);
  EXPECT_EQ(v->Find("claude-subscription")->ask, ConsentAsk::kAlways);
  EXPECT_EQ(v->Find("claude-subscription")->allow_paths, std::vector<std::string>{"/v1/files"});
  auto bound = v->Bind();
  ASSERT_TRUE(bound.ok());
  EXPECT_EQ((*bound)[0].credential.ask, ConsentAsk::kAlways);
}

TEST(ConsentAskTest, NamesParseBothWays) {
  for (ConsentAsk a : {ConsentAsk::kOff, ConsentAsk::kOnce, ConsentAsk::kAlways}) {
    auto back = ParseConsentAsk(ConsentAskName(a));
    ASSERT_TRUE(back.ok());
    EXPECT_EQ(*back, a);
  }
  EXPECT_FALSE(ParseConsentAsk("yes").ok());
  EXPECT_FALSE(ParseConsentAsk("").ok());
}

}  // namespace
}  // namespace cloister::vault

namespace cloister::vault {
namespace {

// SECURITY: `fork --with-credentials` copies API keys with their policy into the fork's own
// file (bound to the fork's name), and never a subscription login or a blob (the SSH key).
TEST_F(VaultTest, ForkCopiesCredentialsButNoLoginAndNoBlob) {
  {
    auto v = Vault::Open(loc_, KeyBackend::kFile);
    ASSERT_TRUE(v.ok());
    v->Put(*MakeCredential(CredentialKind::kAnthropic, real_, {}, "", false));
    ASSERT_TRUE(v->SetPolicy("anthropic", ConsentAsk::kAlways, {"/v1/messages"}).ok());
    OauthLogin login;
    login.refresh_token = "sk-ant-ort01-" + std::string(95, 'r');
    v->Put(*MakeOauthCredential(CredentialKind::kClaudeSubscription,
                                "sk-ant-oat01-" + std::string(95, 'a'), login, {}));
    v->PutBlob("ssh-ed25519", "source seed");
    ASSERT_TRUE(v->Save().ok());
  }
  std::filesystem::create_directories(dir_ + "/fork");
  VaultLocation to{dir_ + "/keys", dir_ + "/fork/secrets.enc", "fork"};
  {
    auto f = Vault::Open(to, KeyBackend::kFile);
    ASSERT_TRUE(f.ok());
    f->PutBlob("ssh-ed25519", "fork seed");
    ASSERT_TRUE(f->Save().ok());
  }
  auto n = CopyCredentialsForFork(loc_, to, KeyBackend::kFile);
  ASSERT_TRUE(n.ok()) << n.error().ToString();
  EXPECT_EQ(*n, 1u);
  auto f = Vault::Open(to, KeyBackend::kFile);
  ASSERT_TRUE(f.ok()) << f.error().ToString();
  ASSERT_EQ(f->credentials().size(), 1u);
  EXPECT_EQ(f->credentials()[0].value, real_);
  EXPECT_EQ(f->credentials()[0].ask, ConsentAsk::kAlways);
  EXPECT_EQ(f->Find("claude-subscription"), nullptr);
  EXPECT_EQ(*f->FindBlob("ssh-ed25519"), "fork seed");
  EXPECT_NE(Slurp(to.secrets_file), Slurp(loc_.secrets_file));
}

}  // namespace
}  // namespace cloister::vault
