#include "proxy/destination_filter.h"

#include <gtest/gtest.h>

#include "proxy/filter_test_util.h"

namespace cloister::proxy::testing {
namespace {

TEST(DestinationFilterTest, ProxyModeRoutesAbsoluteFormAndFindsScope) {
  FilterHarness h;
  auto ex = h.Make("GET", "http://api.github.com/repos?x=1", {{"Host", "api.github.com"}});
  ASSERT_TRUE(DestinationFilter().OnRequestHead(*ex).ok());
  EXPECT_EQ(ex->target.HostPort(), "api.github.com:80");
  EXPECT_EQ(std::string(ex->req.target()), "/repos?x=1");  // origin form upstream
  EXPECT_EQ(ex->rec.path, "/repos");
  EXPECT_EQ(ex->in_scope, std::vector<size_t>{1});  // github only
  EXPECT_FALSE(ex->names_agree);                    // plain HTTP never agrees (no substitution)
}

TEST(DestinationFilterTest, RefusalsCarryTheirStatus) {
  FilterHarness h;
  auto origin_form = h.Make("GET", "/x", {{"Host", "api.github.com"}});
  EXPECT_FALSE(DestinationFilter().OnRequestHead(*origin_form).ok());
  EXPECT_EQ(origin_form->reply_status, 400);

  h.config.egress_policy.allow_all = false;
  h.config.egress_policy.allow = {*ParseEgressRule("api.github.com")};
  auto denied = h.Make("GET", "http://evil.test/", {{"Host", "evil.test"}});
  EXPECT_FALSE(DestinationFilter().OnRequestHead(*denied).ok());
  EXPECT_EQ(denied->reply_status, 403);
  EXPECT_NE(denied->reply_reason.find("egress policy: evil.test:80"), std::string::npos);

  h.tripped = true;
  auto tripped = h.Make("GET", "http://api.github.com/", {{"Host", "api.github.com"}});
  EXPECT_FALSE(DestinationFilter().OnRequestHead(*tripped).ok());
  EXPECT_EQ(tripped->reply_status, 451);
}

TEST(DestinationFilterTest, TlsNamesAndTransparentHost) {
  FilterHarness h;
  h.Tls("api.anthropic.com");
  auto agree = h.Make("GET", "/v1", {{"Host", "api.anthropic.com"}});
  ASSERT_TRUE(DestinationFilter().OnRequestHead(*agree).ok());
  EXPECT_TRUE(agree->names_agree);
  EXPECT_EQ(agree->in_scope, std::vector<size_t>{0});
  auto other = h.Make("GET", "/v1", {{"Host", "evil.test"}});
  ASSERT_TRUE(DestinationFilter().OnRequestHead(*other).ok());
  EXPECT_FALSE(other->names_agree);
  EXPECT_TRUE(other->in_scope.empty());  // the scope must hold every name
  auto tunnel = h.Make("GET", "https://evil.test/v1", {{"Host", "evil.test"}});
  EXPECT_FALSE(DestinationFilter().OnRequestHead(*tunnel).ok());
  EXPECT_EQ(tunnel->reply_status, 400);

  h.origin.transparent = true;
  auto transparent = h.Make("GET", "/v1", {{"Host", "evil.test"}});
  EXPECT_FALSE(DestinationFilter().OnRequestHead(*transparent).ok());
  EXPECT_EQ(transparent->reply_status, 421);
}

}  // namespace
}  // namespace cloister::proxy::testing
