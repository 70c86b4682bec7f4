#include "vault/placeholder.h"

#include <gtest/gtest.h>

#include <set>

#include "base/strings.h"

namespace cloister::vault {
namespace {

const std::string kSalt(32, 's');

Credential Cred(CredentialKind kind, std::string value) {
  auto c = MakeCredential(kind, std::move(value),
                          kind == CredentialKind::kHeader ? std::vector<std::string>{"x.test"}
                                                          : std::vector<std::string>{},
                          kind == CredentialKind::kHeader ? "X-Key" : "", false);
  EXPECT_TRUE(c.ok());
  return *c;
}

bool AllIn(std::string_view s, std::string_view alphabet) {
  for (char c : s) {
    if (alphabet.find(c) == std::string_view::npos) return false;
  }
  return true;
}

// Longest run of one repeated character: a derived placeholder has none longer than a few.
size_t LongestRun(std::string_view s) {
  size_t best = 0, run = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    run = (i > 0 && s[i] == s[i - 1]) ? run + 1 : 1;
    best = std::max(best, run);
  }
  return best;
}

TEST(PlaceholderTest, GithubChecksumMatchesIndependentImplementation) {
  // Vector computed with Python's binascii.crc32 and a base62 (0-9A-Za-z) encoder.
  EXPECT_EQ(GithubChecksum("CLOISTERabcdefghijklmnopqrstuv"), "2kUx9N");
  EXPECT_TRUE(GithubChecksumValid("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"));
  EXPECT_FALSE(GithubChecksumValid("ghp_CLOISTERabcdefghijklmnopqrstuv2kUx9M"));
}

TEST(PlaceholderTest, AnthropicShapePreserved) {
  std::string real = "sk-ant-api03-" + std::string(93, 'Q') + "AA";
  Credential c = Cred(CredentialKind::kAnthropic, real);
  auto ph = MakePlaceholder(kSalt, "ws1", c);
  ASSERT_TRUE(ph.ok());
  EXPECT_EQ(ph->size(), real.size());
  EXPECT_TRUE(StartsWith(*ph, "sk-ant-api03-CLOISTER"));
  EXPECT_TRUE(AllIn(ph->substr(13),
                    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"));
  EXPECT_LE(LongestRun(ph->substr(21)), 4u);
  std::set<char> distinct(ph->begin() + 21, ph->end());
  EXPECT_GT(distinct.size(), 30u);  // full-length entropy, not a padded short secret
}

TEST(PlaceholderTest, GithubTokenHasValidChecksum) {
  Credential c = Cred(CredentialKind::kGithub, "ghp_" + std::string(36, 'z'));
  auto ph = MakePlaceholder(kSalt, "ws1", c);
  ASSERT_TRUE(ph.ok());
  EXPECT_EQ(ph->size(), 40u);
  EXPECT_TRUE(StartsWith(*ph, "ghp_CLOISTER"));
  EXPECT_TRUE(GithubChecksumValid(*ph)) << *ph;
}

TEST(PlaceholderTest, DeterministicPerInstallAndWorkspace) {
  Credential c = Cred(CredentialKind::kOpenai, "sk-proj-" + std::string(100, 'a'));
  auto a = MakePlaceholder(kSalt, "ws1", c);
  auto b = MakePlaceholder(kSalt, "ws1", c);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(*a, *b);
  EXPECT_NE(*a, *MakePlaceholder(kSalt, "ws2", c));
  EXPECT_NE(*a, *MakePlaceholder(std::string(32, 't'), "ws1", c));
  // The user rotates the real key (same format): the guest's placeholder does not change.
  Credential rotated = Cred(CredentialKind::kOpenai, "sk-proj-" + std::string(100, 'b'));
  EXPECT_EQ(*a, *MakePlaceholder(kSalt, "ws1", rotated));
  // Kinds in one workspace get different placeholders.
  Credential other = Cred(CredentialKind::kAnthropic, "sk-proj-" + std::string(100, 'a'));
  EXPECT_NE(*a, *MakePlaceholder(kSalt, "ws1", other));
}

TEST(PlaceholderTest, UnknownFormatKeepsPunctuationAndClasses) {
  std::string real = "abcdef0123456789abcdef0123456789.abcdef0123456789abcdef";
  Credential c = Cred(CredentialKind::kHeader, real);
  auto ph = MakePlaceholder(kSalt, "ws1", c);
  ASSERT_TRUE(ph.ok());
  EXPECT_EQ(ph->size(), real.size());
  EXPECT_EQ((*ph)[32], '.');
  // Lower-case hex cannot spell the marker: none, and the alphabet is kept.
  EXPECT_TRUE(AllIn(ph->substr(0, 32), "0123456789abcdef"));
  EXPECT_NE(ph->substr(0, 32), real.substr(0, 32));
}

TEST(PlaceholderTest, ShortValuesAreLengthenedToKeepEntropy) {
  Credential c = Cred(CredentialKind::kHeader, "Ab3dEf7h9");
  auto ph = MakePlaceholder(kSalt, "ws1", c);
  ASSERT_TRUE(ph.ok());
  EXPECT_TRUE(StartsWith(*ph, "CLOISTER"));
  EXPECT_GE(ph->size(), kPlaceholderMarker.size() + kMinRandomChars);
}

TEST(PlaceholderTest, NeverContainsTheRealValue) {
  for (const std::string& real :
       {std::string("sk-ant-api03-CLOISTERxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"),
        std::string("ghp_CLOISTER0000000000000000000000000")}) {
    Credential c = Cred(CredentialKind::kAnthropic, real);
    auto ph = MakePlaceholder(kSalt, "ws1", c);
    ASSERT_TRUE(ph.ok());
    EXPECT_NE(*ph, real);
    EXPECT_EQ(ph->find(real.substr(13)), std::string::npos);
  }
}

TEST(PlaceholderTest, RefusesMissingSalt) {
  Credential c = Cred(CredentialKind::kOpenai, "sk-proj-aaaaaaaaaaaaaaaaaaaaaaaaaaaaa");
  EXPECT_FALSE(MakePlaceholder("", "ws1", c).ok());
}

}  // namespace
}  // namespace cloister::vault
