// Talks to a real QEMU (`qemu-system-x86_64 -M none`) over QMP.
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <filesystem>

#include "vm/process.h"
#include "vm/qmp.h"

namespace cloister::vm {
namespace {

namespace fs = std::filesystem;

class QmpTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("qmp_test_" + std::to_string(getpid()));
    fs::create_directories(dir_);
    sock_ = (dir_ / "qmp.sock").string();
    SpawnOptions opts;
    opts.stdout_path = (dir_ / "qemu.log").string();
    opts.die_with_parent = true;
    auto pid = SpawnProcess({"qemu-system-x86_64", "-M", "none", "-nodefaults", "-display", "none",
                             "-chardev", "socket,id=qmp,path=" + sock_ + ",server=on,wait=off",
                             "-mon", "chardev=qmp,mode=control"},
                            opts);
    ASSERT_TRUE(pid.ok()) << pid.error().ToString();
    pid_ = *pid;
  }
  void TearDown() override {
    if (pid_ > 0 && !TryReap(pid_)) {
      kill(pid_, SIGKILL);
      WaitChild(pid_, std::chrono::seconds(10));
    }
    fs::remove_all(dir_);
  }
  fs::path dir_;
  std::string sock_;
  pid_t pid_ = -1;
};

TEST_F(QmpTest, NegotiatesRunsCommandsAndQuits) {
  auto qmp = QmpClient::Connect(sock_, std::chrono::seconds(20));
  ASSERT_TRUE(qmp.ok()) << qmp.error().ToString();
  auto status = (*qmp)->Execute("query-status");
  ASSERT_TRUE(status.ok()) << status.error().ToString();
  EXPECT_TRUE((*status)["status"].is_string());

  auto bad = (*qmp)->Execute("no-such-command");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().code(), ErrorCode::kFailedPrecondition);
  EXPECT_NE(bad.error().message().find("no-such-command"), std::string::npos);

  // An fd passed with SCM_RIGHTS is accepted by getfd and can be closed again by name.
  int fd = open("/dev/null", O_WRONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  auto got = (*qmp)->Execute("getfd", {{"fdname", "f1"}}, std::chrono::seconds(10), fd);
  close(fd);
  ASSERT_TRUE(got.ok()) << got.error().ToString();
  EXPECT_TRUE((*qmp)->Execute("closefd", {{"fdname", "f1"}}).ok());
  // Without an fd, getfd fails: proves the fd really travelled above.
  EXPECT_FALSE((*qmp)->Execute("getfd", {{"fdname", "f2"}}).ok());

  ASSERT_TRUE((*qmp)->Execute("quit").ok());
  auto exit = WaitChild(pid_, std::chrono::seconds(20));
  ASSERT_TRUE(exit.has_value());
  EXPECT_EQ(*exit, 0);
  pid_ = -1;
}

TEST_F(QmpTest, ConnectTimesOutOnMissingSocket) {
  auto qmp = QmpClient::Connect((dir_ / "nope.sock").string(), std::chrono::milliseconds(200));
  EXPECT_FALSE(qmp.ok());
}

}  // namespace
}  // namespace cloister::vm
