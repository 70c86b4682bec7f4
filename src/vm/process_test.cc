#include "vm/process.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>

namespace cloister::vm {
namespace {

std::string RunEnv(const SpawnOptions& base) {
  char dir[] = "/tmp/cl-proc-XXXXXX";
  EXPECT_NE(mkdtemp(dir), nullptr);
  SpawnOptions so = base;
  so.stdout_path = std::string(dir) + "/out";
  auto pid = SpawnProcess({"env"}, so);
  EXPECT_TRUE(pid.ok()) << (pid.ok() ? "" : pid.error().ToString());
  if (!pid.ok()) return "";
  EXPECT_EQ(WaitChild(*pid, std::chrono::seconds(60)), 0);
  std::ifstream f(so.stdout_path);
  std::stringstream ss;
  ss << f.rdbuf();
  unlink(so.stdout_path.c_str());
  rmdir(dir);
  return ss.str();
}

TEST(ProcessTest, AnExplicitEnvironmentIsTheChildsWholeEnvironment) {
  setenv("CLOISTER_PROCESS_TEST_SECRET", "sk-ant-api03-not-for-children", 1);
  SpawnOptions so;
  so.env = std::vector<std::string>{"PATH=/usr/bin:/bin", "LANG=C"};
  EXPECT_EQ(RunEnv(so), "PATH=/usr/bin:/bin\nLANG=C\n");
  // Without one the child inherits ours (what the supervisor and QEMU used to get).
  EXPECT_NE(RunEnv({}).find("CLOISTER_PROCESS_TEST_SECRET=sk-ant-api03-not-for-children"),
            std::string::npos);
  unsetenv("CLOISTER_PROCESS_TEST_SECRET");
}

}  // namespace
}  // namespace cloister::vm
