// guest/spawn.h: what a guest command starts with.
#include "guest/spawn.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <set>
#include <string>

#include <gtest/gtest.h>

#include "base/strings.h"

namespace cloister::guest {
namespace {

// SECURITY: a command the agent starts (a user's shell, the agent CLI, sshd's session) holds its
// stdio and nothing else of the agent's: not the channel to the host, not a socket the agent
// opened without close-on-exec.
TEST(SpawnTest, ACommandGetsItsStdioAndNoOtherDescriptorOfTheAgents) {
  int channel_like[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, channel_like), 0);  // no SOCK_CLOEXEC
  int plain = open("/dev/null", O_RDONLY);                            // no O_CLOEXEC
  ASSERT_GE(plain, 3);
  SpawnSpec spec;
  spec.argv = {"sh", "-c", "ls /proc/$$/fd"};
  spec.env = {std::string("PATH=") + kDefaultPath};
  spec.stdin_null = true;
  auto child = Spawn(spec);
  ASSERT_TRUE(child.ok()) << child.error().ToString();
  std::string out;
  for (;;) {
    pollfd p{child->out, POLLIN, 0};
    ASSERT_GE(poll(&p, 1, 60000), 1);
    char buf[4096];
    ssize_t n = read(child->out, buf, sizeof buf);
    if (n < 0 && errno == EAGAIN) continue;
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  int status = 0;
  ASSERT_EQ(waitpid(child->pid, &status, 0), child->pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  std::set<int> fds;
  for (const std::string& l : Split(Trim(out), '\n')) fds.insert(std::stoi(l));
  EXPECT_EQ(fds, (std::set<int>{0, 1, 2})) << out;
  for (int fd : {child->out, child->err, child->in, child->pidfd, plain, channel_like[0],
                 channel_like[1]}) {
    if (fd >= 0) close(fd);
  }
}

}  // namespace
}  // namespace cloister::guest
