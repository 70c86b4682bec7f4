#include "proxy/name_agreement_filter.h"

#include <gtest/gtest.h>

#include "proxy/destination_filter.h"
#include "proxy/filter_test_util.h"

namespace cloister::proxy::testing {
namespace {

int Status421(FilterHarness& h, const std::string& target, const std::string& host) {
  auto ex = h.Make("GET", target, {{"Host", host}});
  if (!DestinationFilter().OnRequestHead(*ex).ok()) return -1;
  Status st = NameAgreementFilter().OnRequestHead(*ex);
  return st.ok() ? 0 : ex->reply_status;
}

TEST(NameAgreementFilterTest, ProxyModeTls) {
  FilterHarness h;
  h.Tls("allowed.test");
  EXPECT_EQ(Status421(h, "/", "allowed.test"), 0);
  EXPECT_EQ(Status421(h, "/", "allowed.test:443"), 0);
  EXPECT_EQ(Status421(h, "/", "blocked.test"), 421);
  h.origin.sni = "blocked.test";  // CONNECT allowed.test, SNI blocked.test
  EXPECT_EQ(Status421(h, "/", "allowed.test"), 421);
  h.origin.sni = "";  // no SNI (an IP literal): the Host alone must agree
  EXPECT_EQ(Status421(h, "/", "allowed.test"), 0);
}

TEST(NameAgreementFilterTest, ProxyModePlainAndTransparent) {
  FilterHarness h;
  EXPECT_EQ(Status421(h, "http://allowed.test/", "allowed.test"), 0);
  EXPECT_EQ(Status421(h, "http://allowed.test/", "blocked.test"), 421);
  // Transparent mode is DestinationFilter's (the connection's name): never this filter's 421.
  h.Tls("allowed.test");
  h.origin.transparent = true;
  h.origin.sni = "blocked.test";
  EXPECT_EQ(Status421(h, "/", "allowed.test"), 0);
}

}  // namespace
}  // namespace cloister::proxy::testing
