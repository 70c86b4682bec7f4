#include "sshagent/host_key.h"

#include <gtest/gtest.h>

#include "sshagent/ed25519_key.h"
#include "sshagent/wire.h"

namespace cloister::sshagent {
namespace {

Ed25519Key Key(char c) { return std::move(Ed25519Key::FromSeed(std::string(kEd25519SeedSize, c))).value(); }

TEST(HostKeyTest, LineRoundTripsAndMatchesOpenSshForm) {
  Ed25519Key k = Key('a');
  auto line = HostKeyLine(k.PublicKeyBlob());
  ASSERT_TRUE(line.ok());
  // The same text as the key's authorized_keys line without its comment.
  EXPECT_EQ(*line, k.AuthorizedKeysLine(""));
  auto blob = HostKeyBlobFromLine(*line);
  ASSERT_TRUE(blob.ok()) << blob.error().ToString();
  EXPECT_EQ(*blob, k.PublicKeyBlob());
  EXPECT_EQ(HostKeyFingerprint(*blob), k.Fingerprint());
}

TEST(HostKeyTest, MalformedLinesAndBlobsAreRefused) {
  std::string b64 = Base64Encode(Key('a').PublicKeyBlob());
  for (std::string bad : std::vector<std::string>{"ssh-ed25519", "ssh-ed25519 ", "ecdsa-sha2-nistp256 " + b64,
                          "ssh-ed25519 " + b64.substr(1), "ssh-ed25519 " + b64 + "AAAA",
                          "ssh-ed25519 " + b64.substr(0, b64.size() - 1) + "!",
                          "ssh-ed25519 " + Base64Encode("not a key")}) {
    EXPECT_FALSE(HostKeyBlobFromLine(bad).ok()) << bad;
  }
  EXPECT_FALSE(HostKeyType("").ok());
  EXPECT_FALSE(HostKeyType(SshWriter().String("ssh-ed25519-cert-v01@openssh.com").String("x").Take()).ok());
  EXPECT_FALSE(HostKeyType(SshWriter().String("ssh-dss").String("x").Take()).ok());
  EXPECT_FALSE(HostKeyType(Key('a').PublicKeyBlob() + "x").ok());
  EXPECT_EQ(*HostKeyType(Key('a').PublicKeyBlob()), "ssh-ed25519");
}

TEST(HostKeyTest, SignatureMustBeTheKeysOverTheData) {
  Ed25519Key host = Key('h'), other = Key('o');
  std::string sid(32, 's');
  auto sig = host.SignBlob(sid);
  ASSERT_TRUE(sig.ok());
  EXPECT_TRUE(VerifyHostKeySignature(host.PublicKeyBlob(), sid, *sig).ok());
  EXPECT_FALSE(VerifyHostKeySignature(other.PublicKeyBlob(), sid, *sig).ok());
  EXPECT_FALSE(VerifyHostKeySignature(host.PublicKeyBlob(), sid + "x", *sig).ok());
  EXPECT_FALSE(VerifyHostKeySignature(host.PublicKeyBlob(), sid, sig->substr(0, sig->size() - 1)).ok());
  EXPECT_FALSE(VerifyHostKeySignature(host.PublicKeyBlob(), sid, "").ok());
}

}  // namespace
}  // namespace cloister::sshagent
