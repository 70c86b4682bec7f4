#include "ui/request.h"

#include <gtest/gtest.h>

namespace cloister::ui {
namespace {

TEST(ParseRouteTest, Routes) {
  struct Row {
    const char* method;
    const char* target;
    RouteKind kind;
    const char* name;
  } rows[] = {
      {"GET", "/", RouteKind::kIndex, ""},
      {"GET", "/?token=abc", RouteKind::kIndex, ""},
      {"GET", "/app.js", RouteKind::kAsset, ""},
      {"GET", "/api/session", RouteKind::kSession, ""},
      {"GET", "/api/workspaces", RouteKind::kWorkspaces, ""},
      {"GET", "/api/workspaces/ws-1", RouteKind::kWorkspace, "ws-1"},
      {"GET", "/api/workspaces/ws/traffic?host=a&limit=5", RouteKind::kTraffic, "ws"},
      {"GET", "/api/workspaces/ws/traffic/live?offset=10", RouteKind::kTrafficLive, "ws"},
      {"GET", "/api/workspaces/ws/confirm?action=wipe", RouteKind::kConfirm, "ws"},
      {"POST", "/api/workspaces/ws/actions/wipe", RouteKind::kAction, "ws"},
      {"POST", "/api/workspaces/ws/audit", RouteKind::kAudit, "ws"},
      {"GET", "/api/leaks", RouteKind::kLeaks, ""},
      {"GET", "/api/consent", RouteKind::kConsent, ""},
      {"POST", "/api/workspaces/ws/consent/7", RouteKind::kConsentAnswer, "ws"},
      // Wrong method or unknown path: not found (never a different route).
      {"POST", "/api/workspaces", RouteKind::kNotFound, ""},
      {"GET", "/api/workspaces/ws/actions/wipe", RouteKind::kNotFound, "ws"},
      {"DELETE", "/", RouteKind::kNotFound, ""},
      {"GET", "/etc/passwd", RouteKind::kNotFound, ""},
  };
  for (const Row& r : rows) {
    auto route = ParseRoute(r.method, r.target);
    ASSERT_TRUE(route.ok()) << r.target << ": " << route.error().ToString();
    EXPECT_EQ(route->kind, r.kind) << r.method << " " << r.target;
    EXPECT_EQ(route->name, r.name) << r.target;
  }
  auto wipe = ParseRoute("POST", "/api/workspaces/ws/actions/wipe-home");
  ASSERT_TRUE(wipe.ok());
  EXPECT_EQ(wipe->action, Action::kWipeHome);
}

TEST(ParseRouteTest, RefusesMalformed) {
  for (const char* t : {"/api/workspaces/../etc", "/api/workspaces/UPPER", "/api/workspaces/a%2fb",
                        "/api/workspaces/.hidden", "/?a=%zz", "/?a=%4", "/?a=%00", "relative",
                        "/api/workspaces/ws/actions/format", "/?a=1&a=2",
                        "/api/workspaces/ws/confirm", "/api/workspaces/ws/confirm?action=nuke",
                        "/api/workspaces/ws/consent/x7", "/api/workspaces/ws/consent/",
                        "/api/workspaces/ws/consent/1234567890123456789"}) {
    std::string method = std::string(t).find("/actions/") != std::string::npos ||
                                 std::string(t).find("/consent/") != std::string::npos
                             ? "POST"
                             : "GET";
    EXPECT_FALSE(ParseRoute(method, t).ok()) << t;
  }
  EXPECT_FALSE(ParseRoute("GET", "/" + std::string(kMaxTargetBytes, 'a')).ok());
  std::string many = "/?";
  for (size_t i = 0; i <= kMaxQueryParams; ++i) many += "k" + std::to_string(i) + "=v&";
  EXPECT_FALSE(ParseRoute("GET", many).ok());
}

TEST(ParseQueryTest, Decodes) {
  auto q = ParseQuery("host=api.example.com&x=a%20b+c&empty=");
  ASSERT_TRUE(q.ok());
  EXPECT_EQ((*q)["host"], "api.example.com");
  EXPECT_EQ((*q)["x"], "a b c");
  EXPECT_EQ((*q)["empty"], "");
  EXPECT_FALSE(ParseQuery("v=" + std::string(kMaxQueryValueBytes + 1, 'a')).ok());
}

TEST(CookieTest, FindsOnlyTheNamedCookie) {
  EXPECT_EQ(CookieValue("a=1; cloister_ui=xyz; b=2", "cloister_ui"), "xyz");
  EXPECT_EQ(CookieValue("xcloister_ui=bad", "cloister_ui"), std::nullopt);
  EXPECT_EQ(CookieValue("", "cloister_ui"), std::nullopt);
}

// SECURITY (issue 37 item 2): the dashboard answers to its per-run name only: not 127.0.0.1 or
// localhost (whose cookies every local web app on any port would get), not a rebound name.
TEST(OriginTest, OnlyOurRunNameAndPort) {
  const std::string name = "0123456789abcdef0123456789abcdef.localhost";
  EXPECT_TRUE(ValidRunHostName(name));
  for (const char* n : {"localhost", "0123456789abcdef.localhost", "0123456789ABCDEF0123456789abcdef.localhost",
                        "0123456789abcdef0123456789abcdef.localhost.evil", "127.0.0.1"}) {
    EXPECT_FALSE(ValidRunHostName(n)) << n;
  }
  EXPECT_TRUE(IsOwnHost(name + ":8080", name, 8080));
  EXPECT_TRUE(IsOwnHost("0123456789ABCDEF0123456789abcdef.LOCALHOST:8080", name, 8080));
  for (std::string h : {name + ":8081", name, std::string("127.0.0.1:8080"), std::string("localhost:8080"),
                        std::string("[::1]:8080"), "x" + name + ":8080", name + ".evil:8080",
                        std::string(""), name + ":8080 "}) {
    EXPECT_FALSE(IsOwnHost(h, name, 8080)) << h;
  }
  EXPECT_FALSE(IsOwnHost("127.0.0.1:8080", "", 8080));
  EXPECT_TRUE(IsOwnOrigin("http://" + name + ":8080", name, 8080));
  for (std::string o : {std::string("null"), std::string("http://127.0.0.1:8080"),
                        "http://" + name + ":8081", "https://" + name + ":8080",
                        std::string("http://evil.example"), "http://" + name + ":8080.evil",
                        std::string("")}) {
    EXPECT_FALSE(IsOwnOrigin(o, name, 8080)) << o;
  }
}

TEST(ActionBodyTest, BoundedAndStrict) {
  auto b = ParseActionBody(R"({"confirm":true,"checkpoint":"20260101T000000Z"})");
  ASSERT_TRUE(b.ok());
  EXPECT_TRUE(b->confirm);
  EXPECT_EQ(b->checkpoint, "20260101T000000Z");
  for (const char* bad : {"[]", "{\"confirm\":\"yes\"}", "{\"checkpoint\":\"../x\"}",
                          "{\"other\":1}", "not json", "{\"confirm\":true",
                          "{\"grant\":\"forever\"}", "{\"grant\":5}"}) {
    EXPECT_FALSE(ParseActionBody(bad).ok()) << bad;
  }
  EXPECT_FALSE(ParseActionBody(std::string(kMaxBodyBytes + 1, ' ')).ok());
  EXPECT_TRUE(SecretEquals("abc", "abc"));
  EXPECT_FALSE(SecretEquals("abc", "abd"));
  EXPECT_FALSE(SecretEquals("", ""));
}

}  // namespace
}  // namespace cloister::ui
