#include "base/file_util.h"
#include "base/testing_file.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

namespace cloister {
namespace {

std::string TempDir() {
  char tmpl[] = "/tmp/cloister-fileutil.XXXXXX";
  return mkdtemp(tmpl);
}

using testfile::Slurp;

TEST(FileUtilTest, WriteFileAtomicReplacesContentAndSetsMode) {
  std::string dir = TempDir();
  std::string path = dir + "/f";
  ASSERT_TRUE(WriteFileAtomic(path, "one", 0600).ok());
  ASSERT_TRUE(WriteFileAtomic(path, "two", 0644).ok());
  EXPECT_EQ(Slurp(path), "two");
  struct stat st;
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0644u);
  // No temp file is left behind.
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir),
                          std::filesystem::directory_iterator()), 1);
  std::filesystem::remove_all(dir);
}

TEST(FileUtilTest, WriteFileTruncatesAndSetsTheModeEvenOverAnExistingFile) {
  std::string dir = TempDir();
  std::string path = dir + "/f";
  ASSERT_TRUE(WriteFile(path, "a longer first content", 0600).ok());
  ASSERT_TRUE(WriteFile(path, std::string("two\0bytes", 9), 0755).ok());
  EXPECT_EQ(Slurp(path), std::string("two\0bytes", 9));
  struct stat st;
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0755u);  // fchmod: open's mode applies only to a new file
  Status missing = WriteFile(dir + "/no/such/f", "x");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.error().message().find(dir + "/no/such/f"), std::string::npos);
  std::filesystem::remove_all(dir);
}

TEST(FileUtilTest, WriteFileAtomicFailsCleanlyInAMissingDirectory) {
  Status st = WriteFileAtomic("/tmp/cloister-no-such-dir-xyz/f", "x", 0600);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error().code(), ErrorCode::kNotFound);
}

TEST(FileUtilTest, SendAllWithFdPassesTheDescriptor) {
  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  int pipefd[2];
  ASSERT_EQ(pipe(pipefd), 0);
  ASSERT_TRUE(SendAllWithFd(sv[0], "hello\n", pipefd[1], "peer").ok());
  char buf[16] = {};
  iovec iov{buf, sizeof(buf)};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))];
  msghdr mh{};
  mh.msg_iov = &iov;
  mh.msg_iovlen = 1;
  mh.msg_control = control;
  mh.msg_controllen = sizeof(control);
  ssize_t n = recvmsg(sv[1], &mh, 0);
  ASSERT_EQ(n, 6);
  EXPECT_EQ(std::string(buf, 6), "hello\n");
  cmsghdr* cm = CMSG_FIRSTHDR(&mh);
  ASSERT_NE(cm, nullptr);
  ASSERT_EQ(cm->cmsg_type, SCM_RIGHTS);
  int got;
  std::memcpy(&got, CMSG_DATA(cm), sizeof(int));
  // The received descriptor is the pipe's write end: bytes written to it reach the read end.
  ASSERT_EQ(write(got, "z", 1), 1);
  char c = 0;
  ASSERT_EQ(read(pipefd[0], &c, 1), 1);
  EXPECT_EQ(c, 'z');
  for (int fd : {sv[0], sv[1], pipefd[0], pipefd[1], got}) close(fd);
}

TEST(FileUtilTest, ReadFileBoundedReadsUpToTheLimitAndRefusesMore) {
  char dir[] = "/tmp/cloister-readb-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  std::string path = std::string(dir) + "/f";
  std::string content(40000, 'x');  // more than one internal read
  ASSERT_TRUE(WriteFile(path, content).ok());
  auto exact = ReadFileBounded(path, content.size());
  ASSERT_TRUE(exact.ok()) << exact.error().ToString();
  EXPECT_EQ(*exact, content);
  auto over = ReadFileBounded(path, content.size() - 1);
  ASSERT_FALSE(over.ok());
  EXPECT_EQ(over.error().code(), ErrorCode::kCorrupt);
  EXPECT_NE(over.error().message().find("larger than 39999 bytes"), std::string::npos);
  auto missing = ReadFileBounded(std::string(dir) + "/absent", 10);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().code(), ErrorCode::kNotFound);
  // A symlink is followed by default and refused with kNoSymlinks.
  std::string link = std::string(dir) + "/link";
  ASSERT_EQ(symlink(path.c_str(), link.c_str()), 0);
  EXPECT_TRUE(ReadFileBounded(link, content.size()).ok());
  auto nofollow = ReadFileBounded(link, content.size(), Follow::kNoSymlinks);
  EXPECT_FALSE(nofollow.ok());
  std::filesystem::remove_all(dir);
}

// The writer sends more than a pipe holds: the drain keeps reading (the writer never blocks), keeps
// only the first max_bytes and returns at end of file.
TEST(FileUtilTest, DrainFdBoundedKeepsTheFirstBytesAndReadsToTheEnd) {
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    close(fds[0]);
    std::string chunk(4096, 'a');
    for (int i = 0; i < 64; ++i) {  // 256 KiB, four times a pipe's default capacity
      chunk[0] = static_cast<char>('0' + i % 10);
      if (write(fds[1], chunk.data(), chunk.size()) != static_cast<ssize_t>(chunk.size())) _exit(1);
    }
    _exit(0);
  }
  close(fds[1]);
  std::string got = DrainFdBounded(fds[0], 5000);
  close(fds[0]);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "the writer blocked or failed";
  ASSERT_EQ(got.size(), 5000u);
  EXPECT_EQ(got[0], '0');
  EXPECT_EQ(got[4096], '1');
  EXPECT_EQ(DrainFdBounded(-1, 10), "");
}

TEST(FlockGuardTest, HoldsAnExclusiveLockUntilDestroyedAndCreatesTheFile) {
  char dir[] = "/tmp/cloister-flock-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  std::string path = std::string(dir) + "/sub.lock";
  // flock(2) locks belong to an open file description: a second open conflicts even here.
  auto probe_free = [&] {
    int fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
    if (fd < 0) return false;
    bool got = flock(fd, LOCK_EX | LOCK_NB) == 0;
    close(fd);
    return got;
  };
  {
    auto guard = FlockGuard::Acquire(path);
    ASSERT_TRUE(guard.ok()) << guard.error().ToString();
    EXPECT_FALSE(probe_free());
    FlockGuard moved = std::move(guard).value();  // moving keeps the lock
    EXPECT_FALSE(probe_free());
  }
  EXPECT_TRUE(probe_free());
  EXPECT_FALSE(FlockGuard::Acquire(std::string(dir) + "/absent-dir/x.lock").ok());
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace cloister
