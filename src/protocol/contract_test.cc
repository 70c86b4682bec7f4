// The contract's spelled-out strings agree with the values they are built from (a URL with its
// port, a listen spec with its socket, paths under the run directory). C++20 cannot concatenate
// constexpr strings, so these are checked here instead of derived.
#include "protocol/contract.h"

#include <string>

#include <gtest/gtest.h>

namespace cloister::protocol {
namespace {

TEST(ContractTest, ProxyUrlAndListenSpecNameTheProxyPort) {
  std::string hostport = std::string(kGuestProxyHost) + ":" + std::to_string(kGuestProxyPort);
  EXPECT_EQ(kGuestProxyUrl, "http://" + hostport);
  EXPECT_EQ(kGuestProxyListen, "tcp:" + hostport);
}

TEST(ContractTest, AgentSocketListenSpecAndRunDirAgree) {
  EXPECT_EQ(kGuestAgentListen, "unix:" + std::string(kGuestAgentSocket));
  std::string run = std::string(kGuestRunDir) + "/";
  EXPECT_EQ(std::string(kGuestAgentSocket).rfind(run, 0), 0u);
  EXPECT_EQ(std::string(kMetaMountPoint).rfind(run, 0), 0u);
}

TEST(ContractTest, KernelCmdlineBootsTheRootDeviceAndHomeIsTheUsers) {
  EXPECT_EQ(std::string(kKernelCmdline).rfind("root=" + std::string(kRootDevice) + " ", 0), 0u);
  EXPECT_EQ(kGuestHome, "/home/" + std::string(kGuestUser));
  EXPECT_NE(kTransparentPort, kGuestProxyPort);
}

}  // namespace
}  // namespace cloister::protocol
