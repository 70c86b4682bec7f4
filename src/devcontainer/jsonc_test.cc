#include "devcontainer/jsonc.h"

#include <gtest/gtest.h>

namespace cloister::devcontainer {
namespace {

TEST(JsoncTest, CommentsAndTrailingCommas) {
  auto d = ParseJsonc(R"(// a devcontainer
{
  /* block
     comment */
  "image": "debian:12", // trailing comment
  "forwardPorts": [3000, 8080, /* last */ ],
  "features": {
    "./f": {"a": "x,}", },
  },
}
)",
                      "devcontainer.json");
  ASSERT_TRUE(d.ok()) << d.error().message();
  EXPECT_EQ(d->value["image"], "debian:12");
  EXPECT_EQ(d->value["forwardPorts"], nlohmann::json({3000, 8080}));
  EXPECT_EQ(d->value["features"]["./f"]["a"], "x,}");  // a comma inside a string is kept
  EXPECT_EQ(d->lines.LineOf({"image"}), 5);
  EXPECT_EQ(d->lines.LineOf({"forwardPorts", "1"}), 6);
  EXPECT_EQ(d->lines.LineOf({"features", "./f", "a"}), 8);
  EXPECT_EQ(d->lines.LineOf({"nope"}), 0);
  EXPECT_EQ(d->lines.LineOf({}), 1);
}

TEST(JsoncTest, CommentMarkersInsideStringsAreText) {
  auto d = ParseJsonc(R"({"a": "http://x/*y*/", "b": "// not a comment"})", "f");
  ASSERT_TRUE(d.ok()) << d.error().message();
  EXPECT_EQ(d->value["a"], "http://x/*y*/");
  EXPECT_EQ(d->value["b"], "// not a comment");
}

TEST(JsoncTest, ByteOrderMarkIsSkipped) {
  auto d = ParseJsonc("\xEF\xBB\xBF{\"a\": 1}", "f");
  ASSERT_TRUE(d.ok()) << d.error().message();
  EXPECT_EQ(d->value["a"], 1);
}

TEST(JsoncTest, MalformedInputNamesTheLine) {
  auto d = ParseJsonc("{\n  \"image\": \"x\",\n  \"build\": {\n    \"dockerfile\" \"Dockerfile\"\n  }\n}\n",
                      "devcontainer.json");
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.error().message().rfind("devcontainer.json:4:", 0), 0u) << d.error().message();
}

TEST(JsoncTest, TruncatedInputNamesTheLastLine) {
  auto d = ParseJsonc("{\n\"a\": [1,\n2,\n", "f.json");
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.error().message().find("f.json:4:"), std::string::npos) << d.error().message();
}

TEST(JsoncTest, UnclosedBlockCommentNamesWhereItOpened) {
  auto d = ParseJsonc("{\n  \"a\": 1 /* oops\n}\n", "f.json");
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.error().message().find("f.json:2:"), std::string::npos) << d.error().message();
  EXPECT_NE(d.error().message().find("never closed"), std::string::npos);
}

TEST(JsoncTest, DoubledCommasAreStillAnError) {
  EXPECT_FALSE(ParseJsonc("[1,,]", "f").ok());
  EXPECT_FALSE(ParseJsonc("{,}", "f").ok());
  EXPECT_FALSE(ParseJsonc("[,]", "f").ok());
}

TEST(JsoncTest, KeyTwiceIsRefusedEvenWhenSpelledWithEscapes) {
  auto d = ParseJsonc("{\n\"postCreateCommand\": \"echo hi\",\n\"post\\u0043reateCommand\": \"curl evil\"\n}",
                      "devcontainer.json");
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.error().message().find("devcontainer.json:3:"), std::string::npos) << d.error().message();
  EXPECT_NE(d.error().message().find("twice"), std::string::npos);
  EXPECT_NE(d.error().message().find("first at line 2"), std::string::npos);
  // The same key in two different objects is fine.
  EXPECT_TRUE(ParseJsonc(R"({"a": {"x": 1}, "b": {"x": 2}})", "f").ok());
}

TEST(JsoncTest, BoundsAreEnforced) {
  JsoncLimits limits;
  limits.max_bytes = 64;
  EXPECT_FALSE(ParseJsonc(std::string(65, ' '), "f", limits).ok());
  limits = {};
  limits.max_depth = 4;
  EXPECT_TRUE(ParseJsonc("[[[[1]]]]", "f", limits).ok());
  auto deep = ParseJsonc("[[[[[1]]]]]", "f", limits);
  ASSERT_FALSE(deep.ok());
  EXPECT_NE(deep.error().message().find("nested deeper"), std::string::npos);
  limits = {};
  limits.max_key_bytes = 8;
  EXPECT_FALSE(ParseJsonc(R"({"123456789": 1})", "f", limits).ok());
  // Deep nesting in the default limits: refused before nlohmann sees it.
  EXPECT_FALSE(ParseJsonc(std::string(100000, '['), "f").ok());
}

TEST(JsoncTest, GarbageNeverCrashes) {
  for (const char* s : {"", "/", "/*", "\"", "\"\\", "\"\\u12", "{\"a\"", "}", "]]]", "{\"a\":}",
                        "tru", "{\"a\":1,/*x*/}", "[1,//\n]", "@"}) {
    (void)ParseJsonc(s, "f");
  }
  EXPECT_TRUE(ParseJsonc("[1,//\n]", "f").ok());
  EXPECT_TRUE(ParseJsonc("{\"a\":1,/*x*/}", "f").ok());
}

}  // namespace
}  // namespace cloister::devcontainer
