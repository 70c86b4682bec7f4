// Tests only: a workspace's control socket speaking the listener side of the consent protocol
// (supervisor/consent.h), for the dashboard's consent tests without a supervisor.
#pragma once

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace cloister::ui::testing {

// Takes one listener, sends it `lines`, and records the hello and the first answer line.
class FakeSupervisor {
 public:
  explicit FakeSupervisor(std::vector<std::string> lines) : lines_(std::move(lines)) {
    char dir[] = "/tmp/cloister-consent.XXXXXX";
    EXPECT_NE(mkdtemp(dir), nullptr);
    dir_ = dir;
    path_ = dir_ + "/supervisor.sock";
    fd_ = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::memcpy(a.sun_path, path_.c_str(), path_.size() + 1);
    EXPECT_EQ(bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    EXPECT_EQ(listen(fd_, 4), 0);
    thread_ = std::thread([this] {
      int c = accept(fd_, nullptr, nullptr);
      if (c < 0) return;
      ReadLine(c, hello_);
      for (const auto& l : lines_) send(c, (l + "\n").data(), l.size() + 1, MSG_NOSIGNAL);
      ReadLine(c, answer_);
      close(c);
      done_ = true;
    });
  }
  ~FakeSupervisor() {
    shutdown(fd_, SHUT_RDWR);
    close(fd_);
    if (thread_.joinable()) thread_.join();
    unlink(path_.c_str());
    rmdir(dir_.c_str());
  }
  const std::string& path() const { return path_; }
  // Valid once the thread is done.
  std::string Join() {
    if (thread_.joinable()) thread_.join();
    return answer_;
  }
  std::string hello() const { return hello_; }
  // The connection ended (the answer line was read, or the listener hung up).
  bool done() const { return done_; }

 private:
  static void ReadLine(int fd, std::string& into) {
    char ch;
    while (read(fd, &ch, 1) == 1 && ch != '\n') into += ch;
  }
  std::vector<std::string> lines_;
  std::string dir_, path_, hello_, answer_;
  int fd_ = -1;
  std::atomic<bool> done_{false};
  std::thread thread_;
};

}  // namespace cloister::ui::testing
