#include "proxy/header_substitution_filter.h"

#include <gtest/gtest.h>

#include "proxy/destination_filter.h"
#include "proxy/filter_test_util.h"
#include "vault/crypto.h"

namespace cloister::proxy::testing {
namespace {

TEST(HeaderSubstitutionFilterTest, SwapsOnlyTheCredentialsOwnHeadersWhenNamesAgree) {
  FilterHarness h;
  h.Tls("api.anthropic.com");
  auto ex = h.Make("GET", "/v1", {{"Host", "api.anthropic.com"}, {"x-api-key", h.Placeholder(0)},
                                  {"X-Other", h.Placeholder(0)}});
  ASSERT_TRUE(DestinationFilter().OnRequestHead(*ex).ok());
  ASSERT_TRUE(HeaderSubstitutionFilter().OnRequestHead(*ex).ok());
  EXPECT_EQ(std::string(ex->req["x-api-key"]), h.Real(0));
  EXPECT_EQ(std::string(ex->req["X-Other"]), h.Placeholder(0));  // not the kind's header
  EXPECT_EQ(ex->rec.swaps, std::vector<std::string>{"anthropic"});
  EXPECT_TRUE(ex->redactor.active());
  EXPECT_EQ(ex->redactor.Apply("echo " + h.Real(0)), "echo " + h.Placeholder(0));
}

TEST(HeaderSubstitutionFilterTest, NothingWithoutTlsOrWhenNamesDisagree) {
  FilterHarness h;
  auto plain = h.Make("GET", "http://api.anthropic.com/v1",
                      {{"Host", "api.anthropic.com"}, {"x-api-key", h.Placeholder(0)}});
  ASSERT_TRUE(DestinationFilter().OnRequestHead(*plain).ok());
  ASSERT_TRUE(HeaderSubstitutionFilter().OnRequestHead(*plain).ok());
  EXPECT_EQ(std::string(plain->req["x-api-key"]), h.Placeholder(0));
  h.Tls("api.anthropic.com");
  h.origin.sni = "other.test";
  auto sni = h.Make("GET", "/v1", {{"Host", "api.anthropic.com"}, {"x-api-key", h.Placeholder(0)}});
  ASSERT_TRUE(DestinationFilter().OnRequestHead(*sni).ok());
  ASSERT_TRUE(HeaderSubstitutionFilter().OnRequestHead(*sni).ok());
  EXPECT_EQ(std::string(sni->req["x-api-key"]), h.Placeholder(0));
  EXPECT_FALSE(sni->redactor.active());
}

TEST(HeaderSubstitutionFilterTest, BasicAuth) {
  FilterHarness h;
  h.Tls("api.github.com");
  auto ex = h.Make("GET", "/", {{"Host", "api.github.com"},
                                {"Authorization", "Basic " + vault::Base64Encode("x:" + h.Placeholder(1))}});
  ASSERT_TRUE(DestinationFilter().OnRequestHead(*ex).ok());
  ASSERT_TRUE(HeaderSubstitutionFilter().OnRequestHead(*ex).ok());
  EXPECT_EQ(std::string(ex->req["Authorization"]), "Basic " + vault::Base64Encode("x:" + h.Real(1)));
}

}  // namespace
}  // namespace cloister::proxy::testing
