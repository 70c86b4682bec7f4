#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <unistd.h>

#include "base/pid_file.h"
#include "cli/cli.h"
#include "cli/testing.h"
#include "store/store.h"
#include "vault/vault.h"

namespace cloister::cli {
namespace {

using testing::Outcome;

class CredCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // A real workspace (the verbs find it through the store).
    ASSERT_EQ(store_.CreateWorkspace("dev"), "");
    setenv("CLOISTER_VAULT_KEY_BACKEND", "file", 1);
  }

  Outcome Run(std::vector<std::string> args, const std::string& input = "") {
    return store_.Run(args, input);
  }

  testing::TempStore store_{"cred"};
  const std::string& root_ = store_.root();
  const std::string real_ = "sk-ant-api03-THEREALVALUE1234567890abcdefghijklmnopqrstuvAA";
};

TEST_F(CredCliTest, AddFromStdinListRemove) {
  Outcome add = Run({"cred", "add", "dev", "anthropic"}, real_ + "\n");
  ASSERT_EQ(add.code, 0) << add.err;
  EXPECT_EQ(add.out.find("THEREALVALUE"), std::string::npos);
  EXPECT_NE(add.out.find("sk-ant-api03-CLOISTER"), std::string::npos);

  Outcome ls = Run({"cred", "ls", "dev", "--json"});
  ASSERT_EQ(ls.code, 0) << ls.err;
  EXPECT_EQ(ls.out.find("THEREALVALUE"), std::string::npos);
  auto doc = nlohmann::json::parse(ls.out);
  // Which backend holds the master key (the fixture forces the file).
  EXPECT_EQ(doc["vault_key"], "file");
  ASSERT_EQ(doc["credentials"].size(), 1u);
  EXPECT_EQ(doc["credentials"][0]["id"], "anthropic");
  EXPECT_EQ(doc["credentials"][0]["hosts"][0], "api.anthropic.com");
  std::string ph = doc["credentials"][0]["placeholder"];
  EXPECT_EQ(ph.size(), real_.size());

  // The file on disk holds the value only encrypted.
  std::ifstream f(root_ + "/workspaces/dev/secrets.enc", std::ios::binary);
  std::string raw(std::istreambuf_iterator<char>(f), {});
  EXPECT_FALSE(raw.empty());
  EXPECT_EQ(raw.find("THEREALVALUE"), std::string::npos);

  // The real value is there for the proxy.
  auto v = vault::Vault::Open({root_ + "/keys", root_ + "/workspaces/dev/secrets.enc", "dev"});
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->Find("anthropic")->value, real_);

  Outcome rm_no = Run({"cred", "rm", "dev", "anthropic"});
  EXPECT_NE(rm_no.code, 0);  // no terminal, no --yes
  Outcome rm = Run({"cred", "rm", "dev", "anthropic", "--yes"});
  ASSERT_EQ(rm.code, 0) << rm.err;
  Outcome again = Run({"cred", "rm", "dev", "anthropic", "--yes"});
  EXPECT_NE(again.code, 0);
  EXPECT_NE(again.err.find("no credential anthropic"), std::string::npos);
}

TEST_F(CredCliTest, ChangesTakeTheWorkspaceLockAndUseTheStorePaths) {
  auto store = Store::Open(root_);
  ASSERT_TRUE(store.ok());
  WorkspacePaths paths = (*store)->Paths("dev");
  ASSERT_EQ(Run({"cred", "add", "dev", "anthropic"}, real_ + "\n").code, 0);
  // The value went where the store says the secrets file is.
  auto v = vault::Vault::Open({root_ + "/keys", paths.secrets, "dev"});
  ASSERT_TRUE(v.ok());
  ASSERT_NE(v->Find("anthropic"), nullptr);
  std::ifstream f(paths.secrets, std::ios::binary);
  std::string before(std::istreambuf_iterator<char>(f), {});

  {
    // Another mutating verb holds the workspace lock and no VM runs: every change is refused
    // (busy) and the secrets file stays as it was; reading still works.
    auto lock = (*store)->LockWorkspace("dev");
    ASSERT_TRUE(lock.ok());
    Outcome add = Run({"cred", "add", "dev", "openai"}, "sk-proj-abcdefghijklmnopqrstuvwxyz012345\n");
    EXPECT_EQ(add.code, kExitError);
    EXPECT_NE(add.err.find("busy"), std::string::npos) << add.err;
    EXPECT_NE(Run({"cred", "rm", "dev", "anthropic", "-f"}).code, 0);
    EXPECT_NE(Run({"cred", "policy", "dev", "--llm-body", "block"}).code, 0);
    std::ifstream g(paths.secrets, std::ios::binary);
    EXPECT_EQ(std::string(std::istreambuf_iterator<char>(g), {}), before);
    Outcome ls = Run({"cred", "ls", "dev"});
    EXPECT_EQ(ls.code, 0) << ls.err;
    EXPECT_NE(ls.out.find("anthropic"), std::string::npos);
    EXPECT_EQ(Run({"cred", "policy", "dev"}).out, "llm-body: flag\n");

    // The lock is held by a running VM's supervisor (its pid file is claimed: written and
    // OFD-locked, as the supervisor does): the change is made under the config lock and applies
    // at the next boot.
    ASSERT_TRUE(Env::Default()->CreateDir(paths.run_dir, 0700).ok() ||
                std::filesystem::is_directory(paths.run_dir));
    Result<int> claimed = ClaimPidFile(paths.supervisor_pid);
    ASSERT_TRUE(claimed.ok()) << claimed.error().ToString();
    Outcome running = Run({"cred", "add", "dev", "openai"},
                          "sk-proj-abcdefghijklmnopqrstuvwxyz012345\n");
    EXPECT_EQ(running.code, 0) << running.err;
    EXPECT_NE(running.err.find("next start"), std::string::npos) << running.err;
    close(*claimed);
    std::filesystem::remove(paths.supervisor_pid);
  }
  auto after = vault::Vault::Open({root_ + "/keys", paths.secrets, "dev"});
  ASSERT_TRUE(after.ok());
  EXPECT_NE(after->Find("openai"), nullptr);
  EXPECT_NE(after->Find("anthropic"), nullptr);
  EXPECT_EQ(Run({"cred", "rm", "dev", "openai", "-f"}).code, 0);
}

TEST_F(CredCliTest, FromEnvAndHeaderKind) {
  setenv("CLOISTER_TEST_TOKEN", "tok_abcdefghijklmnop", 1);
  Outcome add = Run({"cred", "add", "dev", "header", "--header", "X-Api-Key", "--host",
                     "api.example.test", "--from-env", "CLOISTER_TEST_TOKEN"});
  ASSERT_EQ(add.code, 0) << add.err;
  Outcome ls = Run({"cred", "ls", "dev"});
  EXPECT_NE(ls.out.find("header:x-api-key\tapi.example.test"), std::string::npos) << ls.out;
  EXPECT_EQ(ls.out.find("tok_abcdefghijklmnop"), std::string::npos);
  Outcome rm = Run({"cred", "rm", "dev", "header", "--header", "x-api-key", "-f"});
  EXPECT_EQ(rm.code, 0) << rm.err;
}

// Issue 15 item 4: --body on an LLM-provider kind needs the explicit, documented override.
TEST_F(CredCliTest, BodyOnAnLlmProviderNeedsTheOverride) {
  for (const char* kind : {"anthropic", "openai"}) {
    Outcome refused = Run({"cred", "add", "dev", kind, "--body"}, real_);
    EXPECT_EQ(refused.code, kExitUsage) << kind;
    EXPECT_NE(refused.err.find("--allow-llm-body"), std::string::npos) << refused.err;
  }
  EXPECT_EQ(Run({"cred", "ls", "dev"}).out.find("anthropic"), std::string::npos);
  Outcome allowed = Run({"cred", "add", "dev", "anthropic", "--body", "--allow-llm-body"}, real_);
  ASSERT_EQ(allowed.code, 0) << allowed.err;
  // Other kinds keep --body without the override.
  Outcome github = Run({"cred", "add", "dev", "github", "--body"},
                       "ghp_abcdefghijklmnopqrstuvwxyz0123456789");
  EXPECT_EQ(github.code, 0) << github.err;
}

TEST_F(CredCliTest, ErrorsAreClear) {
  EXPECT_EQ(Run({"cred", "add", "dev", "anthropic"}, "").code, kExitUsage);  // empty stdin
  Outcome kind = Run({"cred", "add", "dev", "bogus"}, real_);
  EXPECT_EQ(kind.code, kExitUsage);
  EXPECT_NE(kind.err.find("unknown credential kind"), std::string::npos);
  Outcome nows = Run({"cred", "add", "nope", "anthropic"}, real_);
  EXPECT_EQ(nows.code, kExitError);
  EXPECT_NE(nows.err.find("no workspace named 'nope'"), std::string::npos);
  // There is no way to pass the value in argv.
  EXPECT_EQ(Run({"cred", "add", "dev", "anthropic", real_}).code, kExitUsage);
}

TEST_F(CredCliTest, LlmBodyPolicySwitch) {
  Outcome show = Run({"cred", "policy", "dev"});
  EXPECT_EQ(show.out, "llm-body: flag\n");
  ASSERT_EQ(Run({"cred", "policy", "dev", "--llm-body", "block"}).code, 0);
  EXPECT_EQ(Run({"cred", "policy", "dev"}).out, "llm-body: block\n");
  EXPECT_EQ(Run({"cred", "policy", "dev", "--llm-body", "maybe"}).code, kExitUsage);
}


TEST_F(CredCliTest, AwsFromStdinEnvLinesAndJsonAndFromEnv) {
  const std::string secret = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYREALSECRET";
  const std::string token = "IQoJb3JpZ2luX2VjEREALsessionTOKENabcdefghij";
  // What `aws configure export-credentials --format env` prints.
  Outcome add = Run({"cred", "add", "dev", "aws"},
                    "export AWS_ACCESS_KEY_ID=ASIACLOISTERTEST0001\n"
                    "export AWS_SECRET_ACCESS_KEY=" + secret + "\n"
                    "export AWS_SESSION_TOKEN=\"" + token + "\"\n"
                    "AWS_REGION=eu-west-1\n");
  ASSERT_EQ(add.code, 0) << add.err;
  EXPECT_EQ(add.out.find("REALSECRET"), std::string::npos);
  EXPECT_EQ(add.out.find("REALsession"), std::string::npos);
  Outcome ls = Run({"cred", "ls", "dev", "--json"});
  ASSERT_EQ(ls.code, 0) << ls.err;
  EXPECT_EQ(ls.out.find("REAL"), std::string::npos) << ls.out;
  auto doc = nlohmann::json::parse(ls.out);
  ASSERT_EQ(doc["credentials"].size(), 1u);
  EXPECT_EQ(doc["credentials"][0]["kind"], "aws");
  EXPECT_EQ(doc["credentials"][0]["aws_access_key_id"], "ASIACLOISTERTEST0001");
  EXPECT_EQ(doc["credentials"][0]["aws_region"], "eu-west-1");
  EXPECT_EQ(doc["credentials"][0]["aws_session_token"], true);
  EXPECT_EQ(doc["credentials"][0]["hosts"][0], "amazonaws.com");
  {
    auto v = vault::Vault::Open({root_ + "/keys", root_ + "/workspaces/dev/secrets.enc", "dev"});
    ASSERT_TRUE(v.ok());
    EXPECT_EQ(v->Find("aws")->value, secret);
    EXPECT_EQ(v->Find("aws")->aws_session_token, token);
  }

  // credential_process JSON replaces it (same id); --region overrides.
  Outcome json = Run({"cred", "add", "dev", "aws", "--region", "us-east-2"},
                     R"({"Version":1,"AccessKeyId":"AKIACLOISTERTEST0002","SecretAccessKey":")" +
                         secret + R"("})");
  ASSERT_EQ(json.code, 0) << json.err;
  {
    auto v = vault::Vault::Open({root_ + "/keys", root_ + "/workspaces/dev/secrets.enc", "dev"});
    ASSERT_TRUE(v.ok());
    EXPECT_EQ(v->credentials().size(), 1u);
    EXPECT_EQ(v->Find("aws")->aws_access_key_id, "AKIACLOISTERTEST0002");
    EXPECT_EQ(v->Find("aws")->aws_session_token, "");
    EXPECT_EQ(v->Find("aws")->aws_region, "us-east-2");
  }

  setenv("CLTEST_ACCESS_KEY_ID", "AKIACLOISTERTEST0003", 1);
  setenv("CLTEST_SECRET_ACCESS_KEY", secret.c_str(), 1);
  Outcome env = Run({"cred", "add", "dev", "aws", "--from-env", "CLTEST"});
  ASSERT_EQ(env.code, 0) << env.err;
  {
    auto v = vault::Vault::Open({root_ + "/keys", root_ + "/workspaces/dev/secrets.enc", "dev"});
    EXPECT_EQ(v->Find("aws")->aws_access_key_id, "AKIACLOISTERTEST0003");
  }
  unsetenv("CLTEST_SECRET_ACCESS_KEY");
  Outcome env_missing = Run({"cred", "add", "dev", "aws", "--from-env", "CLTEST"});
  EXPECT_EQ(env_missing.code, kExitUsage);
  EXPECT_NE(env_missing.err.find("CLTEST_SECRET_ACCESS_KEY"), std::string::npos);

  // Missing secret, a secret in argv, and flags of other kinds are refused.
  Outcome none = Run({"cred", "add", "dev", "aws"}, "AWS_ACCESS_KEY_ID=AKIACLOISTERTEST0001\n");
  EXPECT_EQ(none.code, kExitUsage);
  EXPECT_NE(none.err.find("no AWS access key id and secret"), std::string::npos);
  EXPECT_EQ(Run({"cred", "add", "dev", "aws", secret}).code, kExitUsage);
  EXPECT_NE(Run({"cred", "add", "dev", "aws", "--body"}, "AWS_ACCESS_KEY_ID=AKIACLOISTERTEST0001\n"
                "AWS_SECRET_ACCESS_KEY=" + secret + "\n").code, 0);
  Outcome bad = Run({"cred", "add", "dev", "aws"}, "AWS_ACCESS_KEY_ID=AKIACLOISTERTEST0001\n"
                    "AWS_SECRET_ACCESS_KEY=" + secret + "\nAWS_SESSION_TOKEN=has spaces SECRETTOK\n");
  EXPECT_EQ(bad.code, kExitUsage);
  EXPECT_EQ(bad.err.find("SECRETTOK"), std::string::npos);
  EXPECT_EQ(Run({"cred", "rm", "dev", "aws", "--yes"}).code, 0);
}

}  // namespace
}  // namespace cloister::cli
