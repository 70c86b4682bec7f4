#include "proxy/body_swap_filter.h"

#include <gtest/gtest.h>

#include "proxy/destination_filter.h"
#include "proxy/filter_test_util.h"

namespace cloister::proxy::testing {
namespace {

// Credential 3: kind 'header' on oauth.test with body substitution; its placeholder has the
// value's length.
FilterHarness Harness() {
  return FilterHarness({Bind(vault::CredentialKind::kHeader, "refresh-REALVALUE-0123456789-abcdefghijklmnopqrstuvwxyz-ABCDEFGHIJKLMNOP",
                             {"oauth.test"}, "X-Refresh", /*body=*/true)});
}

std::unique_ptr<Exchange> Start(FilterHarness& h) {
  h.Tls("oauth.test");
  auto ex = h.Make("POST", "/token", {{"Host", "oauth.test"}});
  EXPECT_TRUE(DestinationFilter().OnRequestHead(*ex).ok());
  EXPECT_TRUE(BodySwapFilter().OnRequestHead(*ex).ok());
  return ex;
}

TEST(BodySwapFilterTest, WholeBody) {
  FilterHarness h = Harness();
  auto ex = Start(h);
  ASSERT_EQ(ex->body_subst, std::vector<size_t>{3});
  ex->body_whole = true;
  std::string body = "grant=" + h.Placeholder(3) + "&again=" + h.Placeholder(3);
  ASSERT_TRUE(BodySwapFilter().OnRequestBody(*ex, body, true).ok());
  EXPECT_EQ(body, "grant=" + h.Real(3) + "&again=" + h.Real(3));
  EXPECT_EQ(ex->rec.swaps, std::vector<std::string>{"header:x-refresh"});
  EXPECT_TRUE(ex->redactor.active());
}

TEST(BodySwapFilterTest, StreamedAcrossPiecesKeepsTheLength) {
  FilterHarness h = Harness();
  ASSERT_EQ(h.Placeholder(3).size(), h.Real(3).size());
  auto ex = Start(h);
  ex->body_whole = false;
  std::string ph = h.Placeholder(3);
  std::vector<std::string> pieces = {"a=" + ph.substr(0, 5), ph.substr(5, 10),
                                     ph.substr(15) + "&b=1"};
  std::string out;
  BodySwapFilter f;
  for (size_t i = 0; i < pieces.size(); ++i) {
    std::string p = pieces[i];
    ASSERT_TRUE(f.OnRequestBody(*ex, p, i + 1 == pieces.size()).ok());
    out += p;
  }
  EXPECT_EQ(out, "a=" + h.Real(3) + "&b=1");
}

TEST(BodySwapFilterTest, NotForCredentialsThatDidNotOptInOrOtherHosts) {
  FilterHarness h = Harness();
  h.Tls("api.anthropic.com");
  auto ex = h.Make("POST", "/v1", {{"Host", "api.anthropic.com"}});
  ASSERT_TRUE(DestinationFilter().OnRequestHead(*ex).ok());
  ASSERT_TRUE(BodySwapFilter().OnRequestHead(*ex).ok());
  EXPECT_TRUE(ex->body_subst.empty());
  ex->body_whole = true;
  std::string body = h.Placeholder(0) + h.Placeholder(3);
  ASSERT_TRUE(BodySwapFilter().OnRequestBody(*ex, body, true).ok());
  EXPECT_EQ(body, h.Placeholder(0) + h.Placeholder(3));
}

}  // namespace
}  // namespace cloister::proxy::testing
