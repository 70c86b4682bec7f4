#include "sshagent/policy.h"

#include <gtest/gtest.h>

namespace cloister::sshagent {
namespace {

TEST(SshPolicyTest, AbsentKeyMeansDefaults) {
  WorkspaceConfig c;
  auto p = SshPolicyFromConfig(c);
  ASSERT_TRUE(p.ok()) << p.error().ToString();
  EXPECT_FALSE(p->confirm);
  EXPECT_EQ(p->tunnel_hosts, (std::vector<std::string>{"github.com", "gitlab.com", "bitbucket.org"}));
  EXPECT_EQ(p->tunnel_ports, (std::vector<uint16_t>{22}));
}

TEST(SshPolicyTest, RoundTripsThroughConfigJson) {
  WorkspaceConfig c;
  c.name = "dev";
  c.id = "0123456789abcdef0123456789abcdef";
  SshPolicy p;
  p.confirm = true;
  p.tunnel_hosts = {"git.example.test"};
  p.tunnel_ports = {22, 2222};
  ASSERT_TRUE(PutSshPolicy(c, p).ok());
  // Through the store's own serialisation: the key survives as a module-owned extra.
  nlohmann::json doc = ConfigToJson(c);
  EXPECT_EQ(doc["ssh"]["tunnel_ports"], nlohmann::json({22, 2222}));
  WorkspaceConfig back;
  back.extra = nlohmann::json::object();
  back.extra["ssh"] = doc["ssh"];
  auto got = SshPolicyFromConfig(back);
  ASSERT_TRUE(got.ok()) << got.error().ToString();
  EXPECT_EQ(*got, p);
  // Absent fields keep their defaults.
  back.extra["ssh"] = {{"confirm", true}};
  got = SshPolicyFromConfig(back);
  ASSERT_TRUE(got.ok());
  EXPECT_TRUE(got->confirm);
  EXPECT_EQ(got->tunnel_hosts, DefaultTunnelHosts());
  // An empty host list is allowed: no SSH out at all.
  back.extra["ssh"] = {{"tunnel_hosts", nlohmann::json::array()}};
  got = SshPolicyFromConfig(back);
  ASSERT_TRUE(got.ok());
  EXPECT_TRUE(got->tunnel_hosts.empty());
}

TEST(SshPolicyTest, MalformedConfigIsAnErrorNotADefault) {
  WorkspaceConfig c;
  for (nlohmann::json bad : {nlohmann::json("yes"), nlohmann::json({{"confirm", "yes"}}),
                             nlohmann::json({{"tunnel_hosts", "github.com"}}),
                             nlohmann::json({{"tunnel_hosts", {"*.github.com"}}}),
                             nlohmann::json({{"tunnel_hosts", {"github.com:22"}}}),
                             nlohmann::json({{"tunnel_ports", {0}}}),
                             nlohmann::json({{"tunnel_ports", {443}}}),
                             nlohmann::json({{"tunnel_ports", {70000}}}),
                             nlohmann::json({{"tunnel_ports", {"22"}}})}) {
    c.extra["ssh"] = bad;
    auto p = SshPolicyFromConfig(c);
    EXPECT_FALSE(p.ok()) << bad.dump();
    if (!p.ok()) EXPECT_EQ(p.error().code(), ErrorCode::kCorrupt) << bad.dump();
  }
}

TEST(SshPolicyTest, HostNamesAreNormalisedAndChecked) {
  EXPECT_EQ(*NormalizeTunnelHost("GitHub.COM."), "github.com");
  EXPECT_EQ(*NormalizeTunnelHost("a-b.example.test"), "a-b.example.test");
  for (const char* bad : {"", "*.github.com", "github.com:22", "-a.com", "a-.com", "a..com", "a b",
                          "ex\x1b[31m.com", ".com"}) {
    EXPECT_FALSE(NormalizeTunnelHost(bad).ok()) << bad;
  }
  EXPECT_FALSE(NormalizeTunnelHost(std::string(64, 'a') + ".com").ok());
  EXPECT_TRUE(NormalizeTunnelHost(std::string(63, 'a') + ".com").ok());
}

TEST(SshPolicyTest, PortsRefuseTheInterceptedOnes) {
  EXPECT_TRUE(ValidateTunnelPort(22).ok());
  EXPECT_TRUE(ValidateTunnelPort(2222).ok());
  EXPECT_FALSE(ValidateTunnelPort(0).ok());
  EXPECT_FALSE(ValidateTunnelPort(65536).ok());
  Status s = ValidateTunnelPort(443);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().hint().find("compromise detector"), std::string::npos);
  EXPECT_FALSE(ValidateTunnelPort(80).ok());
  WorkspaceConfig c;
  SshPolicy p;
  p.tunnel_ports = {22, 443};
  EXPECT_FALSE(PutSshPolicy(c, p).ok());
  EXPECT_FALSE(c.extra.contains("ssh"));
}

}  // namespace
}  // namespace cloister::sshagent
