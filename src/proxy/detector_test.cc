#include "proxy/detector.h"

#include <gtest/gtest.h>

#include "vault/crypto.h"

namespace cloister::proxy {
namespace {

const std::string kPh = "sk-ant-api03-CLOISTERq7Xk2mPz9vR4tY8wB3nL6hJ1dF5gS0aE";
const std::string kGh = "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";

std::string PercentAll(const std::string& s) {
  static const char* hex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    out += '%';
    out += hex[c >> 4];
    out += hex[c & 15];
  }
  return out;
}

TEST(DetectorTest, FindsRawUrlAndBase64Forms) {
  PlaceholderSet set({kPh, kGh});
  auto raw = set.Scan("Bearer " + kPh);
  ASSERT_EQ(raw.size(), 1u);
  EXPECT_EQ(raw[0].index, 0u);
  EXPECT_EQ(raw[0].encoding, Encoding::kRaw);

  auto url = set.Scan("/collect?k=" + PercentAll(kGh));
  ASSERT_EQ(url.size(), 1u);
  EXPECT_EQ(url[0].index, 1u);
  EXPECT_EQ(url[0].encoding, Encoding::kUrl);

  // Base64 at every alignment, both alphabets.
  for (const std::string& lead : {"", "x", "xy", "xyz", "x-access-token:"}) {
    for (bool urlsafe : {false, true}) {
      std::string b64 = vault::Base64Encode(lead + kGh + "tail", urlsafe);
      auto hits = set.Scan("Basic " + b64);
      ASSERT_EQ(hits.size(), 1u) << lead << " " << urlsafe;
      EXPECT_EQ(hits[0].index, 1u);
      EXPECT_EQ(hits[0].encoding, Encoding::kBase64);
    }
  }
  // Base64, then percent-encoded (e.g. a form field).
  auto both = set.Scan("data=" + PercentAll(vault::Base64Encode("{\"k\":\"" + kPh + "\"}")));
  ASSERT_FALSE(both.empty());
  EXPECT_EQ(both[0].index, 0u);
}

TEST(DetectorTest, NoFalsePositives) {
  PlaceholderSet set({kPh, kGh});
  EXPECT_TRUE(set.Scan("sk-ant-api03-CLOISTER but not the rest").empty());
  EXPECT_TRUE(set.Scan(kPh.substr(0, kPh.size() - 1)).empty());
  EXPECT_TRUE(set.Scan(vault::Base64Encode(kPh.substr(0, 20))).empty());
  EXPECT_TRUE(set.Scan("%zz%4").empty());
  PlaceholderSet empty({});
  EXPECT_TRUE(empty.Scan(kPh).empty());
}

TEST(DetectorTest, StreamFindsPlaceholderSplitAtEveryPoint) {
  PlaceholderSet set({kPh, kGh});
  const std::string body = "{\"messages\":[{\"content\":\"" + kPh + "\"}]}";
  for (size_t cut = 1; cut < body.size(); ++cut) {
    StreamScanner s(set);
    std::vector<Hit> hits;
    s.Feed(body.substr(0, cut), hits);
    s.Feed(body.substr(cut), hits);
    ASSERT_EQ(hits.size(), 1u) << "cut at " << cut;
    EXPECT_EQ(hits[0].encoding, Encoding::kRaw);
  }
}

TEST(DetectorTest, StreamByteByByteInEveryEncoding) {
  PlaceholderSet set({kPh, kGh});
  std::vector<std::pair<std::string, Encoding>> cases = {
      {"a=" + PercentAll(kGh) + "&b=1", Encoding::kUrl},
      {"x" + vault::Base64Encode("zz" + kGh + "zz"), Encoding::kBase64},
      {std::string(100000, 'q') + kGh, Encoding::kRaw},
  };
  for (const auto& [body, enc] : cases) {
    StreamScanner s(set);
    std::vector<Hit> hits;
    for (char c : body) s.Feed(std::string_view(&c, 1), hits);
    ASSERT_EQ(hits.size(), 1u);
    EXPECT_EQ(hits[0].index, 1u);
    EXPECT_EQ(hits[0].encoding, enc);
  }
}

TEST(DetectorTest, StreamReportsEachHitOnce) {
  PlaceholderSet set({kPh});
  StreamScanner s(set);
  std::vector<Hit> hits;
  s.Feed(kPh + kPh, hits);
  s.Feed(kPh, hits);
  EXPECT_EQ(hits.size(), 1u);
}

}  // namespace
}  // namespace cloister::proxy
