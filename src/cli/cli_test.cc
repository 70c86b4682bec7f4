#include "cli/cli.h"

#include <sstream>
#include <vector>

#include <gtest/gtest.h>

namespace cloister::cli {
namespace {

struct Outcome {
  int code;
  std::string out, err;
};

Outcome Invoke(std::vector<const char*> args, const std::string& input = "") {
  args.insert(args.begin(), "cloister");
  std::ostringstream out, err;
  std::istringstream in(input);
  int code = RunCli(static_cast<int>(args.size()), args.data(), out, err, in);
  return {code, out.str(), err.str()};
}

TEST(CliTest, HelpListsVerbsAndExitsZero) {
  Outcome o = Invoke({"--help"});
  EXPECT_EQ(o.code, 0);
  EXPECT_NE(o.out.find("version"), std::string::npos);
}

TEST(CliTest, UnknownVerbIsUsageError) {
  Outcome o = Invoke({"frobnicate"});
  EXPECT_EQ(o.code, kExitUsage);
}

TEST(CliTest, VersionJson) {
  Outcome o = Invoke({"version", "--json"});
  EXPECT_EQ(o.code, 0);
  EXPECT_EQ(nlohmann::json::parse(o.out)["version"], "0.1.0");
}

}  // namespace
}  // namespace cloister::cli
