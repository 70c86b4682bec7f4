#include "proxy/extension_filter_adapter.h"

#include <gtest/gtest.h>

#include "proxy/destination_filter.h"
#include "proxy/filter_test_util.h"

namespace cloister::proxy::testing {
namespace {

namespace http = boost::beast::http;

// A fake request filter: signs the head, wants the whole body, upper-cases it, and brings a
// response transform that holds the body and wraps it.
class Fake : public ExtensionFilter {
 public:
  explicit Fake(std::string mode) : mode_(std::move(mode)) {}
  Result<ExtensionVerdict> OnRequestHead(RequestHead& head) override {
    if (mode_ == "deny") return Error(ErrorCode::kPermissionDenied, "bad signature");
    if (mode_ == "trip") return Error(ErrorCode::kCompromised, "replayed");
    head.headers.push_back({"X-Signed", head.method + " " + head.target + " " + head.host});
    ExtensionVerdict v;
    v.handled = true;
    v.need_full_body = mode_ == "full";
    v.max_body = 4 << 20;
    struct Upper : BodyTransform {
      Result<std::string> Data(std::string_view in) override {
        std::string s(in);
        for (char& c : s) c = static_cast<char>(toupper(static_cast<unsigned char>(c)));
        return s;
      }
      Result<std::string> End() override { return std::string("!"); }
    };
    v.body = std::make_unique<Upper>();
    struct Wrap : ResponseTransform {
      Result<ResponseHold> OnHead(ResponseHead& h) override {
        h.headers.push_back({"X-Seen", std::to_string(h.status)});
        return ResponseHold{true, 100};
      }
      Result<std::string> OnBody(ResponseHead&, std::string body) override { return "<" + body + ">"; }
    };
    v.response = std::make_unique<Wrap>();
    return v;
  }
  Status OnFullBody(RequestHead& head, std::string_view body) override {
    head.headers.push_back({"X-Len", std::to_string(body.size())});
    return OkStatus();
  }

 private:
  std::string mode_;
};

std::unique_ptr<Exchange> RunHead(FilterHarness& h, const std::string& mode, Status* st) {
  h.config.extension_filters = {std::make_shared<Fake>(mode)};
  h.Tls("s3.amazonaws.com");
  auto ex = h.Make("PUT", "/bucket/key", {{"Host", "s3.amazonaws.com"}});
  EXPECT_TRUE(DestinationFilter().OnRequestHead(*ex).ok());
  *st = ExtensionFilterAdapter().OnRequestHead(*ex);
  return ex;
}

TEST(RequestFilterAdapterTest, HeadBodyAndResponse) {
  FilterHarness h;
  Status st;
  auto ex = RunHead(h, "full", &st);
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(std::string(ex->req["X-Signed"]), "PUT /bucket/key s3.amazonaws.com");
  EXPECT_EQ(ex->hold_limit, size_t{4 << 20});
  ex->body_whole = true;
  std::string body = "abc";
  ExtensionFilterAdapter a;
  ASSERT_TRUE(a.OnRequestBody(*ex, body, true).ok());
  EXPECT_EQ(body, "ABC!");
  EXPECT_EQ(std::string(ex->req["X-Len"]), "3");  // OnFullBody saw the body as sent
  ASSERT_EQ(ex->response_transforms.size(), 1u);
  http::response<http::empty_body> res{http::status::ok, 11};
  ASSERT_TRUE(a.OnResponseHead(*ex, res).ok());
  EXPECT_EQ(std::string(res["X-Seen"]), "200");
  EXPECT_TRUE(ex->hold_response);
  EXPECT_EQ(ex->response_hold_max, 100u);
  std::string rbody = "hi";
  ASSERT_TRUE(a.OnResponseBody(*ex, res, rbody, true).ok());
  EXPECT_EQ(rbody, "<hi>");
}

TEST(RequestFilterAdapterTest, StreamedBodyForAFullBodyFilterIs413) {
  FilterHarness h;
  Status st;
  auto ex = RunHead(h, "full", &st);
  ASSERT_TRUE(st.ok());
  ex->body_whole = false;
  std::string piece = "abc";
  EXPECT_FALSE(ExtensionFilterAdapter().OnRequestBody(*ex, piece, false).ok());
  EXPECT_EQ(ex->reply_status, 413);
}

TEST(RequestFilterAdapterTest, ErrorsRefuseOrTrip) {
  FilterHarness h;
  Status st;
  auto deny = RunHead(h, "deny", &st);
  EXPECT_FALSE(st.ok());
  EXPECT_EQ(deny->reply_status, 403);
  EXPECT_TRUE(deny->block.empty());
  auto trip = RunHead(h, "trip", &st);
  EXPECT_EQ(st.error().code(), ErrorCode::kCompromised);
  EXPECT_EQ(trip->block.size(), 1u);
}

TEST(RequestFilterAdapterTest, OnlyWhenTlsNamesAgree) {
  FilterHarness h;
  h.config.extension_filters = {std::make_shared<Fake>("stream")};
  auto ex = h.Make("PUT", "http://s3.amazonaws.com/b", {{"Host", "s3.amazonaws.com"}});
  ASSERT_TRUE(DestinationFilter().OnRequestHead(*ex).ok());
  ASSERT_TRUE(ExtensionFilterAdapter().OnRequestHead(*ex).ok());
  EXPECT_EQ(ex->req.find("X-Signed"), ex->req.end());
  EXPECT_TRUE(ex->response_transforms.empty());
}

}  // namespace
}  // namespace cloister::proxy::testing
