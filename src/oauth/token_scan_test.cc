#include "oauth/token_scan.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace cloister::oauth {
namespace {

const std::string kAccess = "sk-ant-oat01-REALACCESS0123456789abcdefghijklmnopqrstuvwxyz";
const std::string kPlaceholder = "sk-ant-oat01-PLACEHOLDERxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx";
const std::string kJwt = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.c2lnbmF0dXJlc2lnbmF0dXJl";

bool OnlyOurs(std::string_view t) { return t == kPlaceholder; }

// SECURITY (issue 37 item 8): a real token anywhere in a token host's answer is found: any field,
// any depth, a JSON document inside a string, a form, a page; our placeholders are not foreign.
TEST(TokenScanTest, FindsTokensAnywhereButOurPlaceholders) {
  EXPECT_FALSE(FindForeignToken(R"({"access_token":")" + kPlaceholder + R"("})", OnlyOurs));
  EXPECT_FALSE(FindForeignToken(R"({"token_type":"Bearer","expires_in":3600,"scope":"a b"})", OnlyOurs));
  EXPECT_FALSE(FindForeignToken("<html>nothing here</html>", OnlyOurs));
  for (const std::string& body : std::vector<std::string>{
           R"({"access_token":")" + kAccess + R"("})",
           R"({"data":{"items":[{"x":{"y":")" + kAccess + R"("}}]}})",
           R"({"a":[[[[[[{"id_token":")" + kJwt + R"("}]]]]]]})",
           R"({"msg":"use Bearer )" + kAccess + R"( next time"})",
           R"({"wrapped":"{\"refresh_token\":\"opaque-but-named\"}"})",
           R"({"raw_key":"whatever-shape"})",
           R"({"api_key":12345})",
           "access_token=opaque-value&token_type=bearer",
           "<script>var t='" + kJwt + "'</script>",
           "rt_" + std::string(30, 'A'),
           "sk-proj-" + std::string(40, 'b'),
       }) {
    EXPECT_TRUE(FindForeignToken(body, OnlyOurs).has_value()) << body;
  }
  // Not tokens: short sk- words, identifiers that only end in sk-, eyJ without three segments.
  EXPECT_FALSE(FindForeignToken("task-runner sk-short eyJabc.def", OnlyOurs));
  // Deep nesting is no crash (the walk is iterative).
  std::string deep(100000, '[');
  deep += std::string(100000, ']');
  EXPECT_FALSE(FindForeignToken(deep, OnlyOurs));
}

}  // namespace
}  // namespace cloister::oauth
