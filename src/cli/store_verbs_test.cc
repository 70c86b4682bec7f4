// The workspace verbs driven in-process through RunCli, against a temp store.
#include <stdlib.h>

#include <sstream>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli/cli.h"
#include "cli/testing.h"
#include "store/env.h"

namespace cloister::cli {
namespace {

using testing::Outcome;

class StoreVerbsTest : public testing::SparseBaseTest {
 protected:
};

TEST_F(StoreVerbsTest, EveryVerbHasHelp) {
  for (std::vector<std::string> v :
       {std::vector<std::string>{"create", "--help"}, {"ls", "--help"}, {"describe", "--help"},
        {"reset", "--help"}, {"wipe-home", "--help"}, {"wipe", "--help"}, {"rm", "--help"},
        {"checkpoint", "--help"}, {"checkpoint", "restore", "--help"}, {"fork", "--help"},
        {"git", "--help"}, {"diff", "--help"}}) {
    Outcome o = Run(v);
    EXPECT_EQ(o.code, 0) << v[0];
    EXPECT_NE(o.out.find("Usage: cloister " + v[0]), std::string::npos) << v[0] << o.out;
  }
}

TEST_F(StoreVerbsTest, CreateLsDescribe) {
  Outcome c = Create("dev");
  ASSERT_EQ(c.code, 0) << c.err;
  EXPECT_NE(c.out.find("Created workspace 'dev'"), std::string::npos);
  Outcome ls = Run({"ls", "--json"});
  ASSERT_EQ(ls.code, 0);
  nlohmann::json l = ls.json();
  ASSERT_EQ(l.size(), 1u);
  EXPECT_EQ(l[0]["name"], "dev");
  EXPECT_EQ(l[0]["state"], "stopped");
  EXPECT_EQ(l[0]["compromised"], false);
  Outcome human = Run({"ls"});
  EXPECT_NE(human.out.find("dev"), std::string::npos);
  Outcome d = Run({"describe", "dev", "--json"});
  ASSERT_EQ(d.code, 0) << d.err;
  nlohmann::json j = d.json();
  EXPECT_EQ(j["config"]["home_size"], 64 << 20);
  EXPECT_EQ(j["mac"], l[0]["mac"]);
  ASSERT_EQ(j["layers"].size(), 2u);
  EXPECT_EQ(j["layers"][1]["apparent_bytes"], 64 << 20);
  EXPECT_LT(j["layers"][1]["allocated_bytes"].get<uint64_t>(), 16u << 20);
  Outcome dh = Run({"describe", "dev"});
  EXPECT_NE(dh.out.find("Compromised: no"), std::string::npos);
}

// `fork` of a stopped workspace through the CLI: --count names, --json, a new MAC each; `rm -f`
// says in --help that it stops a running VM first.
TEST_F(StoreVerbsTest, ForkCountJsonAndRmForceHelp) {
  ASSERT_EQ(Create("dev").code, 0);
  Outcome f = Run({"fork", "dev", "try", "--count", "2", "--json"});
  ASSERT_EQ(f.code, 0) << f.err;
  nlohmann::json j = f.json();
  ASSERT_EQ(j.size(), 2u);
  EXPECT_EQ(j[0]["name"], "try-1");
  EXPECT_EQ(j[1]["name"], "try-2");
  EXPECT_EQ(j[0]["forked_from"], "dev");
  EXPECT_NE(j[0]["mac"], j[1]["mac"]);
  Outcome one = Run({"fork", "dev", "solo"});
  ASSERT_EQ(one.code, 0) << one.err;
  EXPECT_NE(one.out.find("Forked 'dev' as 'solo'"), std::string::npos) << one.out;
  EXPECT_NE(Run({"fork", "dev", "solo"}).code, 0);  // exists
  EXPECT_NE(Run({"fork", "dev", "x", "--count", "0"}).code, 0);
  EXPECT_NE(Run({"rm", "--help"}).out.find("stop the VM first"), std::string::npos);
  Outcome ls = Run({"ls", "--json"});
  EXPECT_EQ(ls.json().size(), 4u);
}

TEST_F(StoreVerbsTest, ErrorsAreOneLineWithAHint) {
  Outcome bad = Run({"create", "../x", "--image", base_});
  EXPECT_EQ(bad.code, kExitUsage);
  EXPECT_NE(bad.err.find("cloister: error: invalid workspace name"), std::string::npos);
  EXPECT_NE(bad.err.find("Hint: "), std::string::npos);
  Outcome noimg = Run({"create", "x", "--image", dir_ + "/missing.raw"});
  EXPECT_EQ(noimg.code, kExitError);
  EXPECT_NE(noimg.err.find("image not found"), std::string::npos);
  Outcome unknown = Run({"describe", "ghost"});
  EXPECT_EQ(unknown.code, kExitError);
  EXPECT_NE(unknown.err.find("no workspace named 'ghost'"), std::string::npos);
  ASSERT_EQ(Create("dev").code, 0);
  Outcome dup = Create("dev");
  EXPECT_EQ(dup.code, kExitError);
  EXPECT_NE(dup.err.find("already exists"), std::string::npos);
}

TEST_F(StoreVerbsTest, DestructiveVerbsNeedConfirmation) {
  ASSERT_EQ(Create("dev").code, 0);
  // No terminal and no --yes: refused, nothing deleted.
  Outcome o = Run({"rm", "dev"});
  EXPECT_EQ(o.code, kExitError);
  EXPECT_NE(o.err.find("--yes"), std::string::npos);
  EXPECT_EQ(Run({"ls", "--json"}).json().size(), 1u);
  for (const char* verb : {"reset", "wipe-home", "wipe"}) {
    Outcome v = Run({verb, "dev", "--yes"});
    EXPECT_EQ(v.code, 0) << verb << v.err;
  }
  Outcome d = Run({"describe", "dev", "--json"});
  EXPECT_EQ(d.json()["config"]["disks"]["system"], "");
  EXPECT_EQ(Run({"rm", "-f", "dev"}).code, 0);
  EXPECT_EQ(Run({"ls", "--json"}).json().size(), 0u);
}

TEST_F(StoreVerbsTest, CheckpointVerbs) {
  ASSERT_EQ(Create("dev").code, 0);
  Outcome c = Run({"checkpoint", "create", "dev"});
  ASSERT_EQ(c.code, 0) << c.err;
  std::string id = c.out.substr(0, c.out.find('\n'));
  Outcome ls = Run({"checkpoint", "ls", "dev", "--json"});
  ASSERT_EQ(ls.json().size(), 1u);
  EXPECT_EQ(ls.json()[0]["id"], id);
  EXPECT_EQ(ls.json()[0]["automatic"], false);
  EXPECT_EQ(Run({"checkpoint", "restore", "dev", id, "-f"}).code, 0);
  Outcome missing = Run({"checkpoint", "restore", "dev", "20200101-000000", "-f"});
  EXPECT_EQ(missing.code, kExitError);
  EXPECT_NE(missing.err.find("checkpoint ls dev"), std::string::npos);
  EXPECT_EQ(Run({"checkpoint", "rm", "dev", id, "--yes"}).code, 0);
  EXPECT_EQ(Run({"checkpoint", "ls", "dev", "--json"}).json().size(), 0u);
}

}  // namespace
}  // namespace cloister::cli
