#include "proxy/chain.h"

#include <gtest/gtest.h>

#include "proxy/filter_test_util.h"

namespace cloister::proxy::testing {
namespace {

TEST(ChainTest, TheOrderIsOneList) {
  EXPECT_EQ(DefaultChain().Names(),
            (std::vector<std::string>{"destination", "detection", "name_agreement", "consent",
                                      "header_substitution", "hop_by_hop", "response_redaction",
                                      "extension_filters", "body_swap", "identity_encoding"}));
}

// Requests go down the list, responses come back up it; the first error stops the walk.
class Tap : public Filter {
 public:
  Tap(std::string n, std::vector<std::string>* log, bool fail = false)
      : n_(std::move(n)), log_(log), fail_(fail) {}
  const char* name() const override { return n_.c_str(); }
  Status OnRequestHead(Exchange& ex) override {
    log_->push_back("req:" + n_);
    return fail_ ? ex.Refuse(418, n_) : OkStatus();
  }
  Status OnResponseHead(Exchange&, ResponseHeader&) override {
    log_->push_back("res:" + n_);
    return OkStatus();
  }

 private:
  std::string n_;
  std::vector<std::string>* log_;
  bool fail_;
};

TEST(ChainTest, RequestsDownResponsesUpFirstErrorStops) {
  std::vector<std::string> log;
  std::vector<std::unique_ptr<Filter>> f;
  f.push_back(std::make_unique<Tap>("a", &log));
  f.push_back(std::make_unique<Tap>("b", &log));
  Chain chain(std::move(f));
  FilterHarness h;
  auto ex = h.Make("GET", "/", {});
  ASSERT_TRUE(chain.OnRequestHead(*ex).ok());
  boost::beast::http::response<boost::beast::http::empty_body> res;
  ASSERT_TRUE(chain.OnResponseHead(*ex, res).ok());
  EXPECT_EQ(log, (std::vector<std::string>{"req:a", "req:b", "res:b", "res:a"}));

  log.clear();
  std::vector<std::unique_ptr<Filter>> g;
  g.push_back(std::make_unique<Tap>("a", &log, /*fail=*/true));
  g.push_back(std::make_unique<Tap>("b", &log));
  Chain failing(std::move(g));
  auto ex2 = h.Make("GET", "/", {});
  EXPECT_FALSE(failing.OnRequestHead(*ex2).ok());
  EXPECT_EQ(ex2->reply_status, 418);
  EXPECT_EQ(log, std::vector<std::string>{"req:a"});
}

}  // namespace
}  // namespace cloister::proxy::testing
