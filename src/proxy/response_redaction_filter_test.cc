#include "proxy/response_redaction_filter.h"

#include <gtest/gtest.h>

#include "proxy/filter_test_util.h"
#include "vault/crypto.h"

namespace cloister::proxy::testing {
namespace {

namespace http = boost::beast::http;

TEST(ResponseRedactionFilterTest, HeadersAndStreamedBody) {
  FilterHarness h;
  auto ex = h.Make("GET", "/", {{"Host", "api.anthropic.com"}});
  ex->redactor.Add(h.Real(0), h.Placeholder(0));
  http::response<http::empty_body> res{http::status::unauthorized, 11};
  res.set("X-Echo", "key " + h.Real(0));
  res.set("X-B64", vault::Base64Encode(h.Real(0)));
  ResponseRedactionFilter f;
  ASSERT_TRUE(f.OnResponseHead(*ex, res).ok());
  EXPECT_EQ(std::string(res["X-Echo"]), "key " + h.Placeholder(0));
  EXPECT_EQ(std::string(res["X-B64"]).find(vault::Base64Encode(h.Real(0)).substr(0, 40)),
            std::string::npos);
  std::string body = "{\"e\":\"" + h.Real(0) + "\"}";
  std::string out;
  for (size_t i = 0; i < body.size(); i += 7) {
    std::string piece = body.substr(i, 7);
    ASSERT_TRUE(f.OnResponseBody(*ex, res, piece, i + 7 >= body.size()).ok());
    out += piece;
  }
  EXPECT_EQ(out, "{\"e\":\"" + h.Placeholder(0) + "\"}");
}

TEST(ResponseRedactionFilterTest, InactiveWithoutARealValue) {
  FilterHarness h;
  auto ex = h.Make("GET", "/", {{"Host", "a.test"}});
  http::response<http::empty_body> res{http::status::ok, 11};
  std::string body = "as is";
  ASSERT_TRUE(ResponseRedactionFilter().OnResponseBody(*ex, res, body, false).ok());
  EXPECT_EQ(body, "as is");
}

}  // namespace
}  // namespace cloister::proxy::testing
