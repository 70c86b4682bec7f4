#include "proxy/hop_by_hop_filter.h"

#include <gtest/gtest.h>

#include "proxy/filter_test_util.h"

namespace cloister::proxy::testing {
namespace {

namespace http = boost::beast::http;

TEST(HopByHopFilterTest, RequestHeadersNormalised) {
  FilterHarness h;
  auto ex = h.Make("POST", "/", {{"Host", "a.test"}, {"Proxy-Connection", "keep-alive"},
                                 {"Proxy-Authorization", "Basic eA=="}, {"TE", "trailers"},
                                 {"Keep-Alive", "5"}, {"Connection", "close"},
                                 {"Expect", "100-continue"}, {"X-Kept", "1"}});
  ex->req.version(10);
  ASSERT_TRUE(HopByHopFilter().OnRequestHead(*ex).ok());
  for (const char* gone : {"Proxy-Connection", "Proxy-Authorization", "TE", "Keep-Alive",
                           "Connection", "Expect"}) {
    EXPECT_EQ(ex->req.find(gone), ex->req.end()) << gone;
  }
  EXPECT_EQ(std::string(ex->req["X-Kept"]), "1");
  EXPECT_TRUE(ex->expect_continue);
  EXPECT_FALSE(ex->client_keep_alive);
  EXPECT_FALSE(ex->upgrade);
  EXPECT_EQ(ex->req.version(), 11u);
}

TEST(HopByHopFilterTest, UpgradeKeptAndResponseNormalised) {
  FilterHarness h;
  auto ex = h.Make("GET", "/", {{"Host", "a.test"}, {"Upgrade", "websocket"},
                                {"Connection", "Upgrade"}});
  ASSERT_TRUE(HopByHopFilter().OnRequestHead(*ex).ok());
  EXPECT_TRUE(ex->upgrade);
  EXPECT_TRUE(ex->client_keep_alive);
  EXPECT_EQ(std::string(ex->req[http::field::connection]), "upgrade");
  http::response<http::empty_body> res{http::status::ok, 11};
  res.set("Proxy-Authenticate", "Basic");
  res.set("Trailer", "x");
  res.set("Content-Type", "text/plain");
  ASSERT_TRUE(HopByHopFilter().OnResponseHead(*ex, res).ok());
  EXPECT_EQ(res.find("Proxy-Authenticate"), res.end());
  EXPECT_EQ(res.find("Trailer"), res.end());
  EXPECT_NE(res.find("Content-Type"), res.end());
}

}  // namespace
}  // namespace cloister::proxy::testing
