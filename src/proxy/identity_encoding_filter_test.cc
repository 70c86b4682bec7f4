#include "proxy/identity_encoding_filter.h"

#include <gtest/gtest.h>

#include "proxy/filter_test_util.h"

namespace cloister::proxy::testing {
namespace {

namespace http = boost::beast::http;

TEST(IdentityEncodingFilterTest, OnlyWhenARealValueWentOut) {
  FilterHarness h;
  auto none = h.Make("GET", "/", {{"Host", "a.test"}, {"Accept-Encoding", "gzip, br"}});
  ASSERT_TRUE(IdentityEncodingFilter().OnRequestHead(*none).ok());
  EXPECT_EQ(std::string(none->req[http::field::accept_encoding]), "gzip, br");
  http::response<http::empty_body> gz{http::status::ok, 11};
  gz.set(http::field::content_encoding, "gzip");
  EXPECT_TRUE(IdentityEncodingFilter().OnResponseHead(*none, gz).ok());

  auto ex = h.Make("GET", "/", {{"Host", "a.test"}, {"Accept-Encoding", "gzip, br"}});
  ex->redactor.Add(h.Real(0), h.Placeholder(0));
  ASSERT_TRUE(IdentityEncodingFilter().OnRequestHead(*ex).ok());
  EXPECT_EQ(std::string(ex->req[http::field::accept_encoding]), "identity");
  EXPECT_FALSE(IdentityEncodingFilter().OnResponseHead(*ex, gz).ok());
  EXPECT_EQ(ex->reply_status, 502);
  http::response<http::empty_body> plain{http::status::ok, 11};
  EXPECT_TRUE(IdentityEncodingFilter().OnResponseHead(*ex, plain).ok());
  plain.set(http::field::content_encoding, " Identity ");
  EXPECT_TRUE(IdentityEncodingFilter().OnResponseHead(*ex, plain).ok());
  plain.insert(http::field::content_encoding, "br");  // a second field
  EXPECT_FALSE(IdentityEncodingFilter().OnResponseHead(*ex, plain).ok());
}

TEST(IdentityEncodingFilterTest, ForAResponseTransform) {
  FilterHarness h;
  auto ex = h.Make("GET", "/", {{"Host", "a.test"}});
  struct Noop : ResponseTransform {
    Result<ResponseHold> OnHead(ResponseHead&) override { return ResponseHold{}; }
    Result<std::string> OnBody(ResponseHead&, std::string b) override { return b; }
  };
  ex->response_transforms.push_back(std::make_unique<Noop>());
  ASSERT_TRUE(IdentityEncodingFilter().OnRequestHead(*ex).ok());
  EXPECT_EQ(std::string(ex->req[http::field::accept_encoding]), "identity");
  EXPECT_TRUE(ex->identity_response);
}

}  // namespace
}  // namespace cloister::proxy::testing
