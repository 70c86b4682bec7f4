#include <gtest/gtest.h>

#include "vm/qmp.h"

namespace cloister::vm {
namespace {

TEST(QmpParseTest, Kinds) {
  auto g = ParseQmpLine(R"({"QMP":{"version":{},"capabilities":[]}})");
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(g->kind, QmpMessage::Kind::kGreeting);
  auto r = ParseQmpLine(R"({"return":{"status":"running"},"id":"c1"})");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->kind, QmpMessage::Kind::kReturn);
  EXPECT_EQ(r->id, "c1");
  EXPECT_EQ(r->body["status"], "running");
  auto e = ParseQmpLine(R"({"error":{"class":"GenericError","desc":"no"},"id":"c2"})");
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->kind, QmpMessage::Kind::kError);
  auto ev = ParseQmpLine(R"({"event":"SHUTDOWN","data":{"guest":true}})");
  ASSERT_TRUE(ev.ok());
  EXPECT_EQ(ev->kind, QmpMessage::Kind::kEvent);
  EXPECT_EQ(ev->event, "SHUTDOWN");
}

TEST(QmpParseTest, RejectsHostileInput) {
  EXPECT_FALSE(ParseQmpLine("not json").ok());
  EXPECT_FALSE(ParseQmpLine("[1,2]").ok());
  EXPECT_FALSE(ParseQmpLine(R"({"what":1})").ok());
  EXPECT_FALSE(ParseQmpLine(R"({"event":5})").ok());
  EXPECT_FALSE(ParseQmpLine(R"({"error":"x"})").ok());
  EXPECT_FALSE(ParseQmpLine(std::string(kMaxQmpLine + 1, ' ')).ok());
}

}  // namespace
}  // namespace cloister::vm
