#include "proxy/redactor.h"

#include <gtest/gtest.h>

#include "vault/crypto.h"

namespace cloister::proxy {
namespace {

const std::string kReal = "sk-real/SECRET+value=0123456789abcdef";
const std::string kPh = "sk-fake/PLACEH+older=9876543210fedcba";

std::string Pct(const std::string& s, bool all) {
  std::string out;
  for (unsigned char c : s) {
    bool keep = !all && (isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~');
    char b[4];
    snprintf(b, sizeof b, "%%%02X", c);
    out += keep ? std::string(1, static_cast<char>(c)) : std::string(b);
  }
  return out;
}

std::string Hex(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    char b[3];
    snprintf(b, sizeof b, "%02x", c);
    out += b;
  }
  return out;
}

// Issue 15 item 4: every form the detector knows (and hex), at every base64 alignment.
TEST(RedactorTest, EveryEncodedFormIsReplaced) {
  Redactor r;
  r.Add(kReal, kPh);
  const std::string secret = "SECRET+value=0123456789";
  std::vector<std::string> forms = {kReal, Pct(kReal, false), Pct(kReal, true), Hex(kReal)};
  for (const std::string& prefix : {"", "a", "ab"}) {
    forms.push_back(vault::Base64Encode(prefix + kReal));
    forms.push_back(vault::Base64Encode(prefix + kReal, /*url=*/true, false));
  }
  for (const std::string& form : forms) {
    std::string out = r.Apply("x " + form + " y");
    EXPECT_EQ(out.size(), form.size() + 4) << form;  // lengths kept
    // Decode whatever the form was and look for the secret's middle.
    EXPECT_EQ(out.find(form), std::string::npos) << form;
    auto b64 = vault::Base64Decode(out.substr(2, out.size() - 4));
    if (b64.ok()) EXPECT_EQ(b64->find(secret), std::string::npos) << form;
  }
  EXPECT_EQ(r.Apply("x " + Hex(kReal) + " y"), "x " + Hex(kPh) + " y");
  EXPECT_EQ(r.Apply(Pct(kReal, true)), Pct(kPh, true));
}

TEST(RedactorTest, StreamingHoldsOnlyAPossibleStart) {
  Redactor r;
  r.Add(kReal, kPh);
  std::string in = "data: " + vault::Base64Encode(kReal) + "\n\ndata: done\n\n";
  std::string out;
  for (size_t i = 0; i < in.size(); i += 5) out += r.Feed(in.substr(i, 5), i + 5 >= in.size());
  EXPECT_EQ(out, r.Apply(in));
  EXPECT_EQ(out.find(vault::Base64Encode(kReal).substr(0, 20)), std::string::npos);
  // A tail that cannot start any form is sent at once.
  Redactor r2;
  r2.Add(kReal, kPh);
  EXPECT_EQ(r2.Feed("data: hello\n\n", false), "data: hello\n\n");
}

// The forms searched all at once (redactor.h) find what a search form by form finds: every form
// at random places in random text, the stream cut at random places, redacted in place.
TEST(RedactorTest, InPlaceStreamingFindsEveryFormWhereverThePiecesSplit) {
  const std::string kOther = "ghp_OTHERxREALxVALUE0123456789abcdefgh";
  const std::string kOtherPh = "ghp_CLOISTERxPLACEHOLDER0123456789abcd";
  Redactor r;
  r.Add(kReal, kPh);
  r.Add(kOther, kOtherPh);
  std::vector<std::pair<std::string, std::string>> forms;  // (real form, its replacement)
  for (const auto& [real, ph] : {std::pair{kReal, kPh}, std::pair{kOther, kOtherPh}}) {
    forms.push_back({real, ph});
    forms.push_back({Pct(real, false), Pct(ph, false)});
    forms.push_back({Pct(real, true), Pct(ph, true)});
    forms.push_back({Hex(real), Hex(ph)});
  }
  uint32_t seed = 12345;
  auto next = [&] { return seed = seed * 1103515245 + 12345, (seed >> 8) & 0xffffff; };
  const std::string alphabet = "abcdefghijklmnopqrstuvwxyz0123456789%+/=-_ \n{}\":,sk";
  for (int round = 0; round < 20; ++round) {
    std::string in, expect;
    while (in.size() < 200000) {
      size_t text = next() % 3000;
      for (size_t i = 0; i < text; ++i) {
        char c = round % 2 ? static_cast<char>(next()) : alphabet[next() % alphabet.size()];
        in += c;
        expect += c;
      }
      const auto& [form, repl] = forms[next() % forms.size()];
      in += form;
      expect += repl;
    }
    std::string out;
    for (size_t off = 0; off < in.size();) {
      size_t n = std::min<size_t>(in.size() - off, 1 + next() % 70000);
      std::string piece = in.substr(off, n);
      off += n;
      r.FeedInPlace(piece, off == in.size());
      out += piece;
    }
    ASSERT_EQ(out.size(), expect.size()) << round;
    EXPECT_TRUE(out == expect) << "round " << round << ": differs at "
                               << std::mismatch(out.begin(), out.end(), expect.begin()).first -
                                      out.begin();
    EXPECT_EQ(out.find(kReal), std::string::npos);
    EXPECT_EQ(out.find(Hex(kOther)), std::string::npos);
  }
}

// One form alone in a text, at every offset: the all-at-once search must not step over it
// wherever its window lands.
TEST(RedactorTest, ALoneFormIsFoundAtEveryOffset) {
  Redactor r;
  r.Add(kReal, kPh);
  std::vector<std::pair<std::string, std::string>> forms = {
      {kReal, kPh}, {Pct(kReal, true), Pct(kPh, true)}, {Hex(kReal), Hex(kPh)}};
  const std::string text = "the quick brown fox jumps over the lazy dog 0123456789 %+/= sk-";
  for (const auto& [form, repl] : forms) {
    for (size_t off = 0; off < 2 * form.size(); ++off) {
      std::string before;
      while (before.size() < off) before += text[(before.size() * 7 + off) % text.size()];
      std::string after = text.substr(off % text.size());
      EXPECT_EQ(r.Apply(before + form + after), before + repl + after) << off << " " << form;
    }
  }
}

TEST(RedactorTest, OtherLengthPlaceholderBecomesXs) {
  Redactor r;
  r.Add("realvalue-123", "ph");
  EXPECT_EQ(r.Apply("[realvalue-123]"), "[xxxxxxxxxxxxx]");
}

}  // namespace
}  // namespace cloister::proxy
