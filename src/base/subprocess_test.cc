#include "base/subprocess.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <set>

#include <gtest/gtest.h>

#include "base/strings.h"

namespace cloister {
namespace {

// SECURITY: a descriptor this process opened without O_CLOEXEC (as Boost.Asio opens its sockets)
// does not reach the child: the child's shell holds stdin, stdout and stderr only.
TEST(SubprocessTest, TheChildGetsNoDescriptorOfOursButItsStdio) {
  int listener = socket(AF_INET, SOCK_STREAM, 0);  // no SOCK_CLOEXEC, as asio
  ASSERT_GE(listener, 3);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(listener, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(listen(listener, 1), 0);
  int plain = open("/dev/null", O_RDONLY);  // no O_CLOEXEC
  ASSERT_GE(plain, 3);
  auto r = RunProcess({"sh", "-c", "ls /proc/$$/fd"});
  ASSERT_TRUE(r.ok()) << r.error().ToString();
  std::set<int> fds;
  for (const std::string& l : Split(Trim(r->out), '\n')) fds.insert(std::stoi(l));
  EXPECT_EQ(fds, (std::set<int>{0, 1, 2})) << r->out;
  close(plain);
  close(listener);
}

TEST(SubprocessTest, CapturesOutputAndExitCode) {
  auto r = RunProcess({"sh", "-c", "echo out; echo err >&2; exit 3"});
  ASSERT_TRUE(r.ok()) << r.error().ToString();
  EXPECT_EQ(r->exit_code, 3);
  EXPECT_EQ(r->out, "out\n");
  EXPECT_EQ(r->err, "err\n");
}

// A child that exits without reading its stdin: the write gets EPIPE, the caller is not killed by
// SIGPIPE (MasterKeyBackendTest's fake `secret-tool store` did that once in CI).
TEST(SubprocessTest, AChildThatDoesNotReadItsStdinDoesNotKillTheCallerWithSigpipe) {
  RunOptions o;
  o.stdin_data = std::string(4 << 20, 'x');  // more than a pipe holds
  auto r = RunProcess({"sh", "-c", "exit 3"}, o);
  ASSERT_TRUE(r.ok()) << r.error().ToString();
  EXPECT_EQ(r->exit_code, 3);
}

TEST(SubprocessTest, FeedsStdinAndEnvironment) {
  RunOptions opts;
  opts.stdin_data = std::string(200000, 'x');  // larger than a pipe buffer
  opts.env_set["CLOISTER_T"] = "v1";
  auto r = RunProcess({"sh", "-c", "wc -c; echo $CLOISTER_T"}, opts);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(Trim(r->out), "200000\nv1");
}

TEST(SubprocessTest, ArgumentsAreNotInterpretedByAShell) {
  auto r = RunProcess({"echo", "$(id); rm -rf /"});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->out, "$(id); rm -rf /\n");
}

TEST(SubprocessTest, MissingProgramIsNotFound) {
  auto r = RunProcess({"cloister-no-such-program"});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), ErrorCode::kNotFound);
}

TEST(SubprocessTest, AFullDiskOnAnEarlierLineIsNamed) {
  // dpkg-deb's shape: tar reports the full disk, dpkg-deb's last line only says tar failed.
  auto r = RunProcessChecked({"sh", "-c",
                              "echo 'tar: ./usr/bin/x: Cannot write: No space left on device' >&2; "
                              "echo 'dpkg-deb: error: tar subprocess returned error exit status 2' >&2; "
                              "exit 2"});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), ErrorCode::kNoSpace);
  EXPECT_NE(r.error().message().find("Cannot write: No space left on device | dpkg-deb: error"),
            std::string::npos)
      << r.error().message();
  auto plain = RunProcessChecked({"sh", "-c", "echo first >&2; echo last >&2; exit 1"});
  ASSERT_FALSE(plain.ok());
  EXPECT_EQ(plain.error().code(), ErrorCode::kIo);
  EXPECT_EQ(plain.error().message(), "sh exited with 1: last");
}

TEST(SubprocessTest, RunCheckedNamesFailure) {
  auto r = RunProcessChecked({"sh", "-c", "echo boom >&2; exit 1"});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message().find("boom"), std::string::npos);
}

TEST(SubprocessTest, TimeoutKills) {
  RunOptions opts;
  opts.timeout = std::chrono::milliseconds(200);
  auto r = RunProcess({"sleep", "10"}, opts);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->timed_out);
  EXPECT_FALSE(r->success());
}

TEST(SubprocessTest, ClearEnvPassesOnlyWhatIsSet) {
  setenv("CLOISTER_T_INHERITED", "leak", 1);
  RunOptions opts;
  opts.clear_env = true;
  opts.env_set["CLOISTER_T"] = "v1";
  auto r = RunProcess({"/usr/bin/env"}, opts);
  unsetenv("CLOISTER_T_INHERITED");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->out, "CLOISTER_T=v1\n");
}

TEST(SubprocessTest, MaxOutputKills) {
  RunOptions opts;
  opts.max_output = 100000;
  auto r = RunProcess({"sh", "-c", "yes"}, opts);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->output_truncated);
  EXPECT_FALSE(r->success());
  EXPECT_LT(r->out.size(), 200000u);
  EXPECT_FALSE(RunProcessChecked({"sh", "-c", "yes"}, opts).ok());
}

}  // namespace
}  // namespace cloister
