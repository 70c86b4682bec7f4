#include "base/pid_file.h"

#include <stdlib.h>
#include <unistd.h>

#include <fstream>
#include <string>

#include <gtest/gtest.h>

namespace cloister {
namespace {

class PidFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char t[] = "/tmp/pidfile-XXXXXX";
    dir_ = mkdtemp(t);
    path_ = dir_ + "/x.pid";
  }
  void TearDown() override {
    unlink(path_.c_str());
    rmdir(dir_.c_str());
  }
  std::string dir_, path_;
};

TEST_F(PidFileTest, MissingFileIsNotHeld) {
  PidFileState st = ReadPidFile(path_);
  EXPECT_FALSE(st.exists);
  EXPECT_FALSE(st.held);
  EXPECT_EQ(st.pid, 0);
}

TEST_F(PidFileTest, ALivePidWithoutTheLockIsNotHeld) {
  // A recycled pid: the file names a process that is alive (this one), but nobody holds the lock.
  std::ofstream(path_) << getpid() << "\n";
  PidFileState st = ReadPidFile(path_);
  EXPECT_TRUE(st.exists);
  EXPECT_FALSE(st.held);
  EXPECT_EQ(st.pid, getpid());
}

TEST_F(PidFileTest, ClaimHoldsUntilClosedAndExcludesASecondClaim) {
  auto fd = ClaimPidFile(path_);
  ASSERT_TRUE(fd.ok()) << fd.error().ToString();
  PidFileState st = ReadPidFile(path_);
  EXPECT_TRUE(st.held);
  EXPECT_EQ(st.pid, getpid());
  auto second = ClaimPidFile(path_);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.error().code(), ErrorCode::kBusy);
  close(*fd);
  EXPECT_FALSE(ReadPidFile(path_).held);  // the owner is gone: stale at once
  auto again = ClaimPidFile(path_);
  ASSERT_TRUE(again.ok());
  close(*again);
}

TEST_F(PidFileTest, MalformedPidReadsAsZero) {
  std::ofstream(path_) << "12ab\n";
  EXPECT_EQ(ReadPidFile(path_).pid, 0);
  std::ofstream(path_) << "99999999999\n";
  EXPECT_EQ(ReadPidFile(path_).pid, 0);
}

}  // namespace
}  // namespace cloister
