// Unit tests: the transparent-mode header parser and the egress policy (rules, matching, JSON,
// config.json round trip).
#include <gtest/gtest.h>

#include "proxy/policy.h"
#include "proxy/transparent.h"

namespace cloister::proxy {
namespace {

TEST(TransparentHeaderTest, AcceptsNamesAndIpv4) {
  auto a = ParseTransparentHeader("api.example.com 443");
  ASSERT_TRUE(a.ok()) << a.error().ToString();
  EXPECT_EQ(a->host, "api.example.com");
  EXPECT_EQ(a->port, 443);
  auto b = ParseTransparentHeader("registry.npm.test. 8080");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->host, "registry.npm.test");
  EXPECT_EQ(b->port, 8080);
  auto c = ParseTransparentHeader("10.0.0.5 65535");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->host, "10.0.0.5");
  EXPECT_EQ(c->port, 65535);
  EXPECT_TRUE(ParseTransparentHeader("x 1").ok());
  EXPECT_TRUE(ParseTransparentHeader(std::string(63, 'a') + ".b 22").ok());
}

TEST(TransparentHeaderTest, RefusesEverythingElse) {
  for (const std::string& bad : std::vector<std::string>{"", " 443", "host", "host ", "host 0", "host 65536", "host 080", "host 44a",
        "host  443", "host 443 ", "host 443\r", "Host 443", "ho_st 443", "ho*st 443",
        "a..b 443", ".a 443", "a.. 443", "1.2.3 443", "1.2.3.256 80", "01.2.3.4 80",
        "::1 443", "[::1] 443", "host:443 443", "host\t443", "host 4430000",
        std::string(64, 'a') + ".b 22", std::string("ho\0st 443", 9)}) {
    EXPECT_FALSE(ParseTransparentHeader(bad).ok()) << "'" << bad << "'";
  }
  // Length: the whole line with its newline is at most kMaxTransparentHeader bytes.
  std::string name = std::string(60, 'a') + "." + std::string(60, 'b') + "." +
                     std::string(60, 'c') + "." + std::string(60, 'd') + "." + std::string(9, 'e');
  ASSERT_EQ(name.size(), 253u);
  EXPECT_TRUE(ParseTransparentHeader(name + " 443").ok());
  EXPECT_FALSE(ParseTransparentHeader(name + "e 443").ok());  // 254
  std::string longest(kMaxTransparentHeader, 'a');
  EXPECT_FALSE(ParseTransparentHeader(longest).ok());
}

TEST(TransparentHeaderTest, Ipv4Literal) {
  EXPECT_TRUE(IsIpv4Literal("0.0.0.0"));
  EXPECT_TRUE(IsIpv4Literal("255.255.255.255"));
  EXPECT_FALSE(IsIpv4Literal("255.255.255.256"));
  EXPECT_FALSE(IsIpv4Literal("1.2.3.4."));
  EXPECT_FALSE(IsIpv4Literal("1.2.3.4.5"));
  EXPECT_FALSE(IsIpv4Literal("1.2..4"));
  EXPECT_FALSE(IsIpv4Literal(""));
}

TEST(EgressPolicyTest, RulesParseAndNormalise) {
  auto r = ParseEgressRule("API.Example.COM.");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->host, "api.example.com");
  EXPECT_EQ(r->port, 0);
  auto w = ParseEgressRule("*.example.org:443");
  ASSERT_TRUE(w.ok());
  EXPECT_EQ(w->host, "*.example.org");
  EXPECT_EQ(w->port, 443);
  EXPECT_EQ(w->ToString(), "*.example.org:443");
  auto ip = ParseEgressRule("10.0.0.5:5432");
  ASSERT_TRUE(ip.ok());
  EXPECT_EQ(ip->ToString(), "10.0.0.5:5432");
  for (const std::string& bad : std::vector<std::string>{"", "*", "*.", "a.*.b", "*example.com", "ex ample.com", "a:0", "a:65536",
                          "a:", "a:22:33", "1.2.3", "*.1.2.3.4", "-a.com", "a-.com", "a..com",
                          "[::1]:443", "a:b"}) {
    EXPECT_FALSE(ParseEgressRule(bad).ok()) << bad;
  }
}

TEST(EgressPolicyTest, Matching) {
  EgressPolicy p;
  EXPECT_TRUE(p.Allows("anything.test", 1234));  // default: allow all
  EXPECT_FALSE(p.AllowsOpaque("anything.test", 1234));
  p.allow_all = false;
  p.allow = {*ParseEgressRule("api.example.com"), *ParseEgressRule("*.example.org:443"),
             *ParseEgressRule("db.lan:5432"), *ParseEgressRule("ssh.lan:443")};
  EXPECT_TRUE(p.Allows("api.example.com", 443));
  EXPECT_TRUE(p.Allows("api.example.com", 8443));  // no port: any port
  EXPECT_FALSE(p.Allows("x.api.example.com", 443));  // exact means exact
  EXPECT_FALSE(p.Allows("example.com", 443));
  EXPECT_TRUE(p.Allows("a.example.org", 443));
  EXPECT_TRUE(p.Allows("a.b.example.org", 443));
  EXPECT_FALSE(p.Allows("example.org", 443));  // *.suffix: below it only
  EXPECT_FALSE(p.Allows("badexample.org", 443));
  EXPECT_FALSE(p.Allows("a.example.org", 80));
  EXPECT_TRUE(p.Allows("db.lan", 5432));
  EXPECT_FALSE(p.Allows("db.lan", 5433));
  // Opaque: only an entry naming the port, never 80/443.
  EXPECT_TRUE(p.AllowsOpaque("db.lan", 5432));
  EXPECT_FALSE(p.AllowsOpaque("api.example.com", 5432));
  EXPECT_FALSE(p.AllowsOpaque("a.example.org", 443));
  EXPECT_FALSE(p.AllowsOpaque("ssh.lan", 443));
  // Allow-all with an explicit entry still grants its opaque tunnel.
  p.allow_all = true;
  EXPECT_TRUE(p.Allows("elsewhere.test", 443));
  EXPECT_TRUE(p.AllowsOpaque("db.lan", 5432));
  EXPECT_FALSE(p.AllowsOpaque("elsewhere.test", 5432));
}

TEST(EgressPolicyTest, JsonAndConfigRoundTrip) {
  WorkspaceConfig config;
  auto def = EgressPolicyFromConfig(config);
  ASSERT_TRUE(def.ok());
  EXPECT_TRUE(def->allow_all);
  EXPECT_TRUE(def->allow.empty());
  EgressPolicy p;
  p.allow_all = false;
  p.allow = {*ParseEgressRule("api.example.com"), *ParseEgressRule("db.lan:5432")};
  ASSERT_TRUE(PutEgressPolicy(config, p).ok());
  EXPECT_EQ(config.extra["egress"]["allow"][1], "db.lan:5432");
  auto back = EgressPolicyFromConfig(config);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, p);
  // Malformed values refuse (the supervisor then refuses to boot).
  for (const char* doc : {R"("x")", R"({"allow_all":"no"})", R"({"allow":"a.com"})",
                          R"({"allow":[1]})", R"({"allow":["a b"]})"}) {
    config.extra["egress"] = nlohmann::json::parse(doc);
    auto r = EgressPolicyFromConfig(config);
    ASSERT_FALSE(r.ok()) << doc;
    EXPECT_NE(r.error().hint().find("--reset"), std::string::npos);
  }
  EgressPolicy big;
  for (size_t i = 0; i <= kMaxEgressRules; ++i) {
    big.allow.push_back({"h" + std::to_string(i) + ".test", 0});
  }
  EXPECT_FALSE(PutEgressPolicy(config, big).ok());
}

}  // namespace
}  // namespace cloister::proxy
