#include "vault/placeholder.h"

#include <gtest/gtest.h>

#include <cctype>
#include <set>
#include <vector>

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

TEST(PlaceholderTest, UnknownFormatKeepsLengthAndAlphabet) {
  std::string real = "abcdef0123456789abcdef0123456789.abcdef0123456789abcdef";
  Credential c = Cred(CredentialKind::kHeader, real);
  auto ph = MakePlaceholder(kSalt, "ws1", c);
  ASSERT_TRUE(ph.ok());
  EXPECT_EQ(ph->size(), real.size());
  // Lower-case hex cannot spell the marker: none, and the alphabet (hex and '.') is kept.
  EXPECT_TRUE(AllIn(*ph, "0123456789abcdef.")) << *ph;
  EXPECT_NE(ph->substr(0, 32), real.substr(0, 32));
}

// Issue 15 item 9: a placeholder depends on the real value only through its format (prefix,
// length, alphabet), never on where its punctuation is.
TEST(PlaceholderTest, UnknownFormatsPunctuationPositionsDoNotReachThePlaceholder) {
  struct Pair {
    CredentialKind kind;
    std::string a, b;  // same prefix, length and alphabet; punctuation elsewhere
  };
  const std::string aws_a = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY";
  const std::string aws_b = "wJalrXUtnFEMIK7MDENGb/PxRfiCYEXAMPLE/KEY";
  for (const Pair& p : std::vector<Pair>{
           {CredentialKind::kHeader, "P@ss-w0rd!Zq8xLm2Nv5Tb7Yc9Rk3W", "Pss@-w0rd!Zq8xLm2Nv5Tb7Yc9Rk3W"},
           {CredentialKind::kHeader, "P@ss-w0rd!Zq8xLm2Nv5Tb7Yc9Rk3W", "Pa-ss@w0rdZq8xLm!Nv5Tb7Yc9Rk3W"},
           {CredentialKind::kHeader, aws_a, aws_b},
           {CredentialKind::kOpenai, "sk-abc.def-ghi_jkl0123456789ABCDEFGHIJ", "sk-abcdef.ghi-jkl_0123456789ABCDEFGHIJ"},
           {CredentialKind::kHeader, "glpat-ab_cd-ef0123456789XYZWVUTSRQPO", "glpat-abcd_ef-0123456789XYZWVUTSRQPO"}}) {
    ASSERT_EQ(p.a.size(), p.b.size());
    auto pa = MakePlaceholder(kSalt, "ws1", Cred(p.kind, p.a));
    auto pb = MakePlaceholder(kSalt, "ws1", Cred(p.kind, p.b));
    ASSERT_TRUE(pa.ok() && pb.ok());
    EXPECT_EQ(*pa, *pb) << p.a << " vs " << p.b;
    EXPECT_EQ(pa->size(), p.a.size());
    // And no punctuation of the real value is copied to the real value's positions.
    size_t kept = 0, punct = 0;
    for (size_t i = 0; i < p.a.size(); ++i) {
      bool alnum = std::isalnum(static_cast<unsigned char>(p.a[i])) != 0;
      if (!alnum && i >= 6) {
        ++punct;
        kept += (*pa)[i] == p.a[i];
      }
    }
    EXPECT_LT(kept, punct == 0 ? 1u : punct) << *pa << " copies the punctuation of " << p.a;
  }
}

TEST(PlaceholderTest, FixedFormatSeparatorsStayPut) {
  std::string real = "github_pat_" + std::string(22, 'A') + "_" + std::string(59, 'b');
  auto ph = MakePlaceholder(kSalt, "ws1", Cred(CredentialKind::kGithub, real));
  ASSERT_TRUE(ph.ok());
  EXPECT_EQ(ph->size(), real.size());
  EXPECT_TRUE(StartsWith(*ph, "github_pat_CLOISTER"));
  EXPECT_EQ((*ph)[11 + 22], '_');
  EXPECT_TRUE(AllIn(ph->substr(11, 22), "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"));
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
