#include "devcontainer/env_check.h"

#include <gtest/gtest.h>

namespace cloister::devcontainer {
namespace {

Status Check(const std::string& name, const std::string& value) {
  return CheckContainerEnv({{name, value}}, "containerEnv");
}

TEST(EnvCheckTest, OrdinaryEnvironmentPasses) {
  EXPECT_TRUE(CheckContainerEnv({{"GOFLAGS", "-mod=mod"},
                                 {"PATH", "/usr/local/go/bin:/usr/bin:/bin"},
                                 {"POSTGRES_PASSWORD", "postgres"},
                                 {"DATABASE_URL", "postgres://postgres:postgres@localhost:5432/dev"},
                                 {"NODE_ENV", "development"},
                                 {"_private", ""}},
                                "containerEnv")
                  .ok());
}

TEST(EnvCheckTest, CredentialShapedValuesAreRefused) {
  const std::string values[] = {
      "sk-ant-api03-" + std::string(40, 'A'),
      "ghp_" + std::string(36, 'b'),
      "github_pat_" + std::string(30, 'c'),
      "glpat-" + std::string(20, 'd'),
      "AKIAIOSFODNN7EXAMPLE",
      "Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.c2lnbmF0dXJlc2lnbmF0dXJl",
      "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXk=\n-----END OPENSSH PRIVATE KEY-----",
      "xoxb-1234567890-abcdef",
      "https://user:ghp_" + std::string(36, 'e') + "@github.com/x.git",
  };
  for (const std::string& v : values) {
    Status st = Check("SOME_VAR", v);
    ASSERT_FALSE(st.ok()) << v;
    EXPECT_EQ(st.error().code(), ErrorCode::kPermissionDenied) << v;
    EXPECT_NE(st.error().hint().find("cloister cred add"), std::string::npos);
    // The refusal names the shape, never the value beyond its public prefix.
    EXPECT_EQ(st.error().message().find(v.substr(v.size() - 12)), std::string::npos) << v;
  }
  // A secret-looking value under a name that says it is one.
  EXPECT_FALSE(Check("MY_SERVICE_TOKEN", "a1b2c3d4e5f6g7h8i9j0k1").ok());
  EXPECT_TRUE(Check("MY_SERVICE_MODE", "a1b2c3d4e5f6g7h8i9j0k1").ok());
}

TEST(EnvCheckTest, HostValuesAndCloisterVariablesAreRefused) {
  EXPECT_FALSE(Check("T", "${localEnv:GITHUB_TOKEN}").ok());
  EXPECT_FALSE(Check("W", "${localWorkspaceFolder}/bin").ok());
  EXPECT_FALSE(Check("P", "${containerEnv:PATH}:/x").ok());
  for (const char* reserved : {"HTTPS_PROXY", "http_proxy", "NO_PROXY", "SSL_CERT_FILE",
                               "NODE_EXTRA_CA_CERTS", "npm_config_registry", "ANTHROPIC_API_KEY",
                               "GH_TOKEN", "HOME", "USER"}) {
    Status st = Check(reserved, "x");
    EXPECT_FALSE(st.ok()) << reserved;
  }
  EXPECT_FALSE(Check("1ABC", "x").ok());
  EXPECT_FALSE(Check("A-B", "x").ok());
  EXPECT_FALSE(Check("A", std::string("a\0b", 3)).ok());
}

}  // namespace
}  // namespace cloister::devcontainer
