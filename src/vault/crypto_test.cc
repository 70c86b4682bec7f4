#include "vault/crypto.h"

#include <gtest/gtest.h>

#include "base/strings.h"

namespace cloister::vault {
namespace {

TEST(CryptoTest, HkdfMatchesRfc5869Case1) {
  std::string ikm(22, '\x0b');
  std::string salt = *HexDecode("000102030405060708090a0b0c");
  std::string info = *HexDecode("f0f1f2f3f4f5f6f7f8f9");
  auto okm = HkdfSha256(ikm, salt, info, 42);
  ASSERT_TRUE(okm.ok());
  EXPECT_EQ(HexEncode(*okm),
            "3cb25f25faacd57a90434f64d0362f2a2d2d0a90cf1a5a4c5db02d56ecc4c5bf34007208d5b887185865");
}

TEST(CryptoTest, AeadRoundTripAndTamperDetection) {
  std::string key = *RandomBytes(kAeadKeySize);
  auto sealed = AeadSeal(key, "aad", "the secret");
  ASSERT_TRUE(sealed.ok());
  EXPECT_EQ(sealed->find("the secret"), std::string::npos);
  auto opened = AeadOpen(key, "aad", *sealed);
  ASSERT_TRUE(opened.ok());
  EXPECT_EQ(*opened, "the secret");

  EXPECT_EQ(AeadOpen(key, "other aad", *sealed).error().code(), ErrorCode::kCorrupt);
  std::string tampered = *sealed;
  tampered[14] ^= 1;
  EXPECT_EQ(AeadOpen(key, "aad", tampered).error().code(), ErrorCode::kCorrupt);
  std::string other = *RandomBytes(kAeadKeySize);
  EXPECT_FALSE(AeadOpen(other, "aad", *sealed).ok());
  EXPECT_FALSE(AeadOpen(key, "aad", sealed->substr(0, 20)).ok());
  // Two seals of the same plaintext differ (fresh nonce).
  EXPECT_NE(*AeadSeal(key, "aad", "x"), *AeadSeal(key, "aad", "x"));
}

TEST(CryptoTest, Base64Rfc4648Vectors) {
  EXPECT_EQ(Base64Encode("foobar"), "Zm9vYmFy");
  EXPECT_EQ(Base64Encode("fooba"), "Zm9vYmE=");
  EXPECT_EQ(Base64Encode("foob"), "Zm9vYg==");
  EXPECT_EQ(Base64Encode("foob", false, false), "Zm9vYg");
  EXPECT_EQ(Base64Encode("\xfb\xff", true), "-_8=");
  EXPECT_EQ(*Base64Decode("Zm9vYg=="), "foob");
  EXPECT_EQ(*Base64Decode("-_8"), "\xfb\xff");
  EXPECT_FALSE(Base64Decode("Zm9v!").ok());
  EXPECT_FALSE(Base64Decode("Z").ok());
}

TEST(CryptoTest, Crc32CheckValue) {
  EXPECT_EQ(Crc32("123456789"), 0xCBF43926u);
  EXPECT_EQ(Crc32(""), 0u);
}

}  // namespace
}  // namespace cloister::vault
