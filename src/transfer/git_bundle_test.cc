#include "transfer/git_bundle.h"

#include <gtest/gtest.h>

namespace cloister::transfer {
namespace {

const std::string kOid = "0123456789abcdef0123456789abcdef01234567";

TEST(GitBundleTest, ParsesV2AndV3Headers) {
  auto h = ParseBundleHeader("# v2 git bundle\n-" + std::string(40, 'a') + " base\n" + kOid +
                             " refs/heads/main\n\nPACK....");
  ASSERT_TRUE(h.ok()) << h.error().ToString();
  EXPECT_EQ(h->version, 2);
  ASSERT_EQ(h->prerequisites.size(), 1u);
  ASSERT_EQ(h->refs.size(), 1u);
  EXPECT_EQ(h->refs[0].name, "refs/heads/main");
  EXPECT_EQ(h->refs[0].oid, kOid);
  EXPECT_EQ(h->header_size, std::string("# v2 git bundle\n-").size() + 40 + 6 + 41 + 16 + 1);
  auto v3 = ParseBundleHeader("# v3 git bundle\n@object-format=sha256\n" + std::string(64, 'b') +
                              " refs/heads/x\n\n");
  ASSERT_TRUE(v3.ok()) << v3.error().ToString();
  EXPECT_EQ(v3->object_format, "sha256");
}

TEST(GitBundleTest, RefusesMalformedHeaders) {
  for (const std::string& bad : {
           std::string(""),
           std::string("# v4 git bundle\n" + kOid + " refs/heads/main\n\n"),
           std::string("# v2 git bundle\n" + kOid + " refs/heads/main\n"),  // no blank line
           std::string("# v2 git bundle\n\n"),                              // no reference
           std::string("# v2 git bundle\n" + kOid.substr(1) + " refs/heads/main\n\n"),
           std::string("# v2 git bundle\n" + std::string(40, 'G') + " refs/heads/main\n\n"),
           std::string("# v2 git bundle\n" + kOid + "\n\n"),
           std::string("# v2 git bundle\n" + kOid + " refs/heads/a..b\n\n"),
           std::string("# v2 git bundle\n" + kOid + " refs/heads/x\x1b[31m\n\n"),
           std::string("# v2 git bundle\n" + kOid + " main\n\n"),
           std::string("# v2 git bundle\n" + kOid + " refs/heads/x\n-" + kOid + "\n\n"),
           std::string("# v3 git bundle\n@filter=blob:none\n" + kOid + " refs/heads/x\n\n"),
           std::string("# v2 git bundle\n@object-format=sha1\n" + kOid + " refs/heads/x\n\n"),
           std::string("# v2 git bundle\n" + kOid + " refs/heads/" + std::string(5000, 'a') +
                       "\n\n"),
       }) {
    EXPECT_FALSE(ParseBundleHeader(bad).ok()) << bad.substr(0, 80);
  }
  std::string many = "# v2 git bundle\n";
  for (size_t i = 0; i <= kMaxBundleRefs; ++i) many += kOid + " refs/heads/b" + std::to_string(i) + "\n";
  EXPECT_FALSE(ParseBundleHeader(many + "\n").ok());
}

TEST(GitBundleTest, RefNamesFollowCheckRefFormat) {
  for (const char* ok : {"refs/heads/main", "refs/heads/feature/x-1", "HEAD", "refs/tags/v1.0"}) {
    EXPECT_TRUE(ValidRefName(ok)) << ok;
  }
  for (const char* bad : {"main", "refs/", "refs/heads/", "refs/heads/.x", "refs/heads/x.lock",
                          "refs/heads/a//b", "refs/heads/a@{1}", "refs/heads/a b", "refs/heads/a:b",
                          "refs/heads/a~1", "refs/heads/a^", "refs/heads/*", "refs/heads/x.",
                          "refs/heads/a\\b", "refs/heads/-x/../y"}) {
    EXPECT_FALSE(ValidRefName(bad)) << bad;
  }
}

// SECURITY: a bundle holding any reference beside the one asked for is refused as a whole.
TEST(GitBundleTest, OnlyTheAskedRefsMayComeBack) {
  auto h = ParseBundleHeader("# v2 git bundle\n" + kOid + " refs/heads/main\n" + kOid +
                             " refs/heads/evil\n\n");
  ASSERT_TRUE(h.ok());
  Status s = CheckBundleRefs(*h, {"refs/heads/main"});
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().code(), ErrorCode::kPermissionDenied);
  EXPECT_NE(s.error().message().find("refs/heads/evil"), std::string::npos);
  EXPECT_TRUE(CheckBundleRefs(*h, {"refs/heads/main", "refs/heads/evil"}).ok());
  EXPECT_EQ(CheckBundleRefs(*h, {"refs/heads/main", "refs/heads/evil", "refs/heads/gone"})
                .error()
                .code(),
            ErrorCode::kNotFound);
}

}  // namespace
}  // namespace cloister::transfer
