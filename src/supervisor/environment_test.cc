#include "supervisor/environment.h"

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

namespace cloister::vm {
namespace {

using Vars = std::map<std::string, std::string>;

EnvLookup From(const Vars& vars) {
  return [&vars](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  };
}

// A shell a user might start cloister from: secrets, locale, home, and cloister's own overrides.
const Vars kShell = {
    {"PATH", "/home/u/bin:/usr/bin:/bin"},
    {"HOME", "/home/u"},
    {"LANG", "de_DE.UTF-8"},
    {"LC_ALL", "de_DE.UTF-8"},
    {"ANTHROPIC_API_KEY", "sk-ant-api03-0123456789abcdefghijklmnopqrstuvwxyz"},
    {"AWS_SECRET_ACCESS_KEY", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"},
    {"GH_TOKEN", "ghp_0123456789abcdefghijklmnopqrstuvwxyz"},
    {"SSH_AUTH_SOCK", "/tmp/ssh-x/agent.1"},
    {"LD_PRELOAD", "/tmp/evil.so"},
    {"DBUS_SESSION_BUS_ADDRESS", "unix:path=/run/user/1000/bus"},
    {"CLOISTER_VAULT_KEY_BACKEND", "file"},
    {"CLOISTER_TCG_CPU", "qemu64"},
    {"CLOISTER_PROXY_RESOLVE", "a.test:443=127.0.0.1:8443"},
    {"CLOISTER_PROXY_UPSTREAM_CA", "/tmp/ca.pem"},
    {"CLOISTER_GUEST_NPM_REGISTRY", "https://registry.test/"},
    {"CLOISTER_AGENT_BIN", "/b/cloister-agent"},
    {"CLOISTER_AUDIT_BIN", "/b/cloister-audit"},
    {"CLOISTER_BINARY_DIR", "/b"},
    {"CLOISTER_HOME", "/home/u/.cloister"},  // the CLI's, not read by the supervisor
    {"CLOISTER_EXE", "/b/cloister"},         // the CLI's
};

TEST(EnvironmentTest, TheSupervisorGetsExactlyItsListFromAFullShell) {
  struct Case {
    const char* what;
    Vars shell;
    std::vector<std::string> want;
  };
  const std::vector<Case> cases = {
      {"a full shell", kShell,
       {"PATH=/home/u/bin:/usr/bin:/bin", "LANG=C", "DBUS_SESSION_BUS_ADDRESS=unix:path=/run/user/1000/bus",
        "CLOISTER_VAULT_KEY_BACKEND=file", "CLOISTER_TCG_CPU=qemu64",
        "CLOISTER_GUEST_NPM_REGISTRY=https://registry.test/",
        "CLOISTER_PROXY_RESOLVE=a.test:443=127.0.0.1:8443", "CLOISTER_PROXY_UPSTREAM_CA=/tmp/ca.pem",
        "CLOISTER_AGENT_BIN=/b/cloister-agent", "CLOISTER_AUDIT_BIN=/b/cloister-audit",
        "CLOISTER_BINARY_DIR=/b"}},
      {"an empty environment", {}, {std::string("PATH=") + kDefaultPath, "LANG=C"}},
      {"empty values are dropped", {{"PATH", ""}, {"CLOISTER_TCG_CPU", ""}},
       {std::string("PATH=") + kDefaultPath, "LANG=C"}},
      {"secrets only", {{"ANTHROPIC_API_KEY", "sk-ant-api03-x"}, {"OPENAI_API_KEY", "sk-proj-x"}},
       {std::string("PATH=") + kDefaultPath, "LANG=C"}},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(SupervisorEnvironment(From(c.shell)), c.want) << c.what;
  }
}

TEST(EnvironmentTest, QemuGetsPathAndLangOnly) {
  EXPECT_EQ(QemuEnvironment(From(kShell)),
            (std::vector<std::string>{"PATH=/home/u/bin:/usr/bin:/bin", "LANG=C"}));
  EXPECT_EQ(QemuEnvironment(From({})),
            (std::vector<std::string>{std::string("PATH=") + kDefaultPath, "LANG=C"}));
}

TEST(EnvironmentTest, NoValueOfTheShellButTheListedOnesReachesEitherChild) {
  for (const auto& env : {SupervisorEnvironment(From(kShell)), QemuEnvironment(From(kShell))}) {
    for (const std::string& e : env) {
      for (const char* secret : {"sk-ant-api03", "wJalrXUtnFEMI", "ghp_", "ssh-x", "evil.so",
                                 "de_DE", "/home/u/.cloister"}) {
        EXPECT_EQ(e.find(secret), std::string::npos) << e;
      }
    }
  }
}

}  // namespace
}  // namespace cloister::vm
