#include "supervisor/state.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "supervisor/control.h"

namespace cloister::vm {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

class StateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char t[] = "/tmp/vmstate-XXXXXX";
    dir_ = mkdtemp(t);
    p_.name = "ws";
    p_.run_dir = dir_;
    p_.supervisor_pid = dir_ + "/supervisor.pid";
    p_.supervisor_socket = dir_ + "/supervisor.sock";
    p_.suspend_state = dir_ + "/suspend.state";
    p_.console_log = dir_ + "/console.log";
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string dir_;
  RunPaths p_;
};

TEST_F(StateTest, StoppedAndSuspendedWithoutPidFile) {
  EXPECT_EQ(DeriveStatus(p_).state, VmState::kStopped);
  std::ofstream(p_.suspend_state) << "ram";
  EXPECT_EQ(DeriveStatus(p_).state, VmState::kSuspended);
}

TEST_F(StateTest, StalePidFileIsBrokenWithHint) {
  std::ofstream(p_.supervisor_pid) << getpid() << "\n";  // a live pid, but nobody holds the lock
  VmStatus st = DeriveStatus(p_);
  EXPECT_EQ(st.state, VmState::kBroken);
  EXPECT_NE(st.hint.find("cloister stop ws --force"), std::string::npos);
  EXPECT_EQ(LivePid(p_.supervisor_pid), 0);
}

TEST_F(StateTest, ClaimedPidFileIsExclusive) {
  auto fd = ClaimPidFile(p_.supervisor_pid);
  ASSERT_TRUE(fd.ok());
  EXPECT_EQ(LivePid(p_.supervisor_pid), getpid());
  auto again = ClaimPidFile(p_.supervisor_pid);
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.error().code(), ErrorCode::kBusy);
  // Held lock, nobody answering on the socket: broken (hung supervisor).
  VmStatus st = DeriveStatus(p_, std::chrono::milliseconds(300));
  EXPECT_EQ(st.state, VmState::kBroken);
  EXPECT_NE(st.detail.find("does not answer"), std::string::npos);
  close(*fd);
  EXPECT_EQ(LivePid(p_.supervisor_pid), 0);  // lock released with the fd
}

TEST_F(StateTest, LiveSupervisorAnswersItsState) {
  auto fd = ClaimPidFile(p_.supervisor_pid);
  ASSERT_TRUE(fd.ok());
  auto lfd = ListenUnix(p_.supervisor_socket);
  ASSERT_TRUE(lfd.ok());
  std::thread server([&] {
    for (const char* state : {"booting", "running"}) {
      int c = accept4(*lfd, nullptr, nullptr, SOCK_CLOEXEC);
      LineConn conn(c);
      auto req = conn.Read(std::chrono::steady_clock::now() + std::chrono::seconds(5));
      ASSERT_TRUE(req.ok());
      EXPECT_EQ(JsonString(*req, "op"), "status");
      ASSERT_TRUE(conn.Send({{"ok", true}, {"state", state}, {"stage", "x"}}).ok());
    }
  });
  EXPECT_EQ(DeriveStatus(p_).state, VmState::kBooting);
  EXPECT_EQ(DeriveStatus(p_).state, VmState::kRunning);
  server.join();
  close(*lfd);
  close(*fd);
}

TEST(ControlTest, PassesFdAndRejectsOversizeLines) {
  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  LineConn a(sv[0]), b(sv[1]);
  int pipefd[2];
  ASSERT_EQ(pipe2(pipefd, O_CLOEXEC), 0);
  ASSERT_TRUE(a.Send({{"ok", true}}, pipefd[1]).ok());
  close(pipefd[1]);
  int got = -1;
  auto msg = b.Read(std::chrono::steady_clock::now() + std::chrono::seconds(5), &got);
  ASSERT_TRUE(msg.ok());
  ASSERT_GE(got, 0);
  ASSERT_EQ(write(got, "hi", 2), 2);  // the received fd is the pipe's write end
  close(got);
  char buf[4] = {0};
  EXPECT_EQ(read(pipefd[0], buf, sizeof(buf)), 2);
  EXPECT_STREQ(buf, "hi");
  close(pipefd[0]);

  std::string huge(kMaxControlLine + 10, 'x');
  std::thread writer([&] { (void)!write(sv[0], huge.data(), huge.size()); });
  auto bad = b.Read(std::chrono::steady_clock::now() + std::chrono::seconds(5));
  writer.join();
  EXPECT_FALSE(bad.ok());
}

TEST(ControlTest, ErrorReplyRoundTrip) {
  Error e(ErrorCode::kCompromised, "flagged", "`cloister wipe ws`");
  Error back = ErrorFromReply(ErrorReply(e));
  EXPECT_EQ(back.code(), ErrorCode::kCompromised);
  EXPECT_EQ(back.message(), "flagged");
  EXPECT_EQ(back.hint(), "`cloister wipe ws`");
  EXPECT_EQ(JsonString(json{{"a", 1}}, "a"), "");
}

}  // namespace
}  // namespace cloister::vm
