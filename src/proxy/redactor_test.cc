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

TEST(RedactorTest, OtherLengthPlaceholderBecomesXs) {
  Redactor r;
  r.Add("realvalue-123", "ph");
  EXPECT_EQ(r.Apply("[realvalue-123]"), "[xxxxxxxxxxxxx]");
}

}  // namespace
}  // namespace cloister::proxy
