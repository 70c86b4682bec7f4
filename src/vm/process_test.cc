#include "vm/process.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fstream>
#include <set>
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

// SECURITY: QEMU gets the descriptors it is handed (keep_fds) and nothing else of the
// supervisor's: not a socket the proxy opened without O_CLOEXEC (Boost.Asio's are), not a file.
TEST(ProcessTest, TheChildGetsItsKeptDescriptorsAndNoOtherOfOurs) {
  int leaked = socket(AF_INET, SOCK_STREAM, 0);  // no SOCK_CLOEXEC, as asio
  int plain = open("/dev/null", O_RDONLY);       // no O_CLOEXEC
  int kept = open("/dev/null", O_RDONLY | O_CLOEXEC);
  ASSERT_GE(leaked, 3);
  ASSERT_GE(plain, 3);
  ASSERT_GE(kept, 3);
  char dir[] = "/tmp/cl-proc-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  SpawnOptions so;
  so.stdout_path = std::string(dir) + "/out";
  so.keep_fds = {kept};
  auto pid = SpawnProcess({"sh", "-c", "ls /proc/$$/fd"}, so);
  ASSERT_TRUE(pid.ok()) << pid.error().ToString();
  EXPECT_EQ(WaitChild(*pid, std::chrono::seconds(60)), 0);
  std::ifstream f(so.stdout_path);
  std::set<int> fds;
  for (std::string l; std::getline(f, l);) fds.insert(std::stoi(l));
  EXPECT_EQ(fds, (std::set<int>{0, 1, 2, kept}));
  unlink(so.stdout_path.c_str());
  rmdir(dir);
  close(leaked);
  close(plain);
  close(kept);
}

}  // namespace
}  // namespace cloister::vm
