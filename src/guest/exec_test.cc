// Exec end to end without a VM: the host client and the guest server, each behind its own Mux,
// over one socketpair standing in for the virtio-serial port.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>

#include <gtest/gtest.h>

#include "channel/exec_client.h"
#include "channel/mux.h"
#include "guest/exec_server.h"
#include "guest/users.h"

namespace cloister::guest {
namespace {

using namespace std::chrono_literals;
using channel::ExecControl;
using channel::ExecExit;
using channel::ExecIo;
using channel::ExecRequest;
using channel::Mux;
using channel::MuxOptions;
using channel::MuxRole;

// Collects everything written to a pipe on a thread; lets tests wait for a substring.
class Collector {
 public:
  Collector() {
    EXPECT_EQ(pipe2(fds_, O_CLOEXEC), 0);
    thread_ = std::thread([this] {
      char buf[65536];
      while (true) {
        ssize_t n = read(fds_[0], buf, sizeof buf);
        if (n <= 0) break;
        std::lock_guard<std::mutex> l(mu_);
        data_.append(buf, static_cast<size_t>(n));
        cv_.notify_all();
      }
    });
  }
  ~Collector() { Finish(); }
  int write_fd() const { return fds_[1]; }
  // Closes the write end and waits for the reader; returns everything.
  std::string Finish() {
    if (fds_[1] >= 0) {
      close(fds_[1]);
      fds_[1] = -1;
    }
    if (thread_.joinable()) thread_.join();
    if (fds_[0] >= 0) {
      close(fds_[0]);
      fds_[0] = -1;
    }
    std::lock_guard<std::mutex> l(mu_);
    return data_;
  }
  bool WaitFor(const std::string& needle, std::chrono::milliseconds limit = 20s) {
    std::unique_lock<std::mutex> l(mu_);
    return cv_.wait_for(l, limit, [&] { return data_.find(needle) != std::string::npos; });
  }

 private:
  int fds_[2] = {-1, -1};
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::string data_;
};

class ExecTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("cloister-exec-test-" + std::to_string(getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_ / "home");
    std::ofstream(dir_ / "passwd") << "root:x:0:0:root:" << (dir_ / "home").string()
                                   << ":/bin/sh\n"
                                   << "dev:x:1000:1000:dev:" << (dir_ / "home").string()
                                   << ":/bin/sh\n";
    std::ofstream(dir_ / "group") << "root:x:0:\ndev:x:1000:\nwheel:x:10:dev\n";
    server_.passwd_path = (dir_ / "passwd").string();
    server_.group_path = (dir_ / "group").string();
    server_.base_env = {{"CLOISTER_WORKSPACE", "ws1"}};
    server_.switch_user = geteuid() == 0;
    int sv[2];
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    MuxOptions h;
    h.role = MuxRole::kHost;
    MuxOptions g;
    g.role = MuxRole::kGuest;
    host_ = Mux::Create(sv[0], h).value();
    guest_ = Mux::Create(sv[1], g).value();
    guest_->RegisterService(channel::kExecService,
                            [this](int fd, const std::vector<std::string>&) {
                              std::thread([this, fd] { ServeExec(fd, server_); }).detach();
                            });
    ASSERT_TRUE(host_->Start().ok());
    ASSERT_TRUE(guest_->Start().ok());
  }
  void TearDown() override {
    host_.reset();
    guest_.reset();
    std::filesystem::remove_all(dir_);
  }

  ExecRequest Req(std::vector<std::string> argv) {
    ExecRequest r;
    r.argv = std::move(argv);
    r.user = geteuid() == 0 ? "root" : "dev";
    return r;
  }

  struct Outcome {
    Result<ExecExit> exit{Error(ErrorCode::kInternal, "not run")};
    std::string out, err;
  };
  // Runs `req` with `input` on stdin (nullopt: no stdin).
  Outcome Run(const ExecRequest& req, std::optional<std::string> input = std::nullopt,
              ExecControl* control = nullptr) {
    Outcome o;
    auto fd = host_->Open(channel::kExecService, {});
    if (!fd.ok()) {
      o.exit = fd.error();
      return o;
    }
    Collector out, err;
    ExecIo io;
    io.out = out.write_fd();
    io.err = err.write_fd();
    int in[2] = {-1, -1};
    std::thread feeder;
    if (input) {
      EXPECT_EQ(pipe2(in, O_CLOEXEC), 0);
      io.in = in[0];
      feeder = std::thread([&, data = *input] {
        size_t off = 0;
        while (off < data.size()) {
          ssize_t n = write(in[1], data.data() + off, data.size() - off);
          if (n <= 0) break;
          off += static_cast<size_t>(n);
        }
        close(in[1]);
      });
    }
    o.exit = channel::RunExec(*fd, req, io, control);
    if (feeder.joinable()) feeder.join();
    if (in[0] >= 0) close(in[0]);
    close(*fd);
    o.out = out.Finish();
    o.err = err.Finish();
    return o;
  }

  std::filesystem::path dir_;
  ExecServerOptions server_;
  std::unique_ptr<Mux> host_;
  std::unique_ptr<Mux> guest_;
};

TEST_F(ExecTest, StdoutStderrAndExitCodePropagate) {
  auto o = Run(Req({"sh", "-c", "echo hello; echo oops >&2; exit 42"}));
  ASSERT_TRUE(o.exit.ok()) << o.exit.error().message();
  EXPECT_FALSE(o.exit->signaled);
  EXPECT_EQ(o.exit->value, 42);
  EXPECT_EQ(o.exit->ShellCode(), 42);
  EXPECT_EQ(o.out, "hello\n");
  EXPECT_EQ(o.err, "oops\n");
}

TEST_F(ExecTest, StdinStreamsAMegabyteThrough) {
  std::string data;
  for (int i = 0; data.size() < (1 << 20); ++i) data += "line " + std::to_string(i) + "\n";
  auto o = Run(Req({"cat"}), data);
  ASSERT_TRUE(o.exit.ok()) << o.exit.error().message();
  EXPECT_EQ(o.exit->value, 0);
  EXPECT_EQ(o.out.size(), data.size());
  EXPECT_TRUE(o.out == data);
}

TEST_F(ExecTest, WithoutStdinTheCommandSeesEof) {
  auto o = Run(Req({"sh", "-c", "cat; echo done"}));
  ASSERT_TRUE(o.exit.ok());
  EXPECT_EQ(o.out, "done\n");
}

TEST_F(ExecTest, CommandNotFoundIs127AndNotExecutableIs126) {
  auto o = Run(Req({"no-such-command-xyz"}));
  ASSERT_TRUE(o.exit.ok());
  EXPECT_EQ(o.exit->value, 127);
  EXPECT_NE(o.err.find("no-such-command-xyz: command not found"), std::string::npos);
  std::string script = (dir_ / "noexec.sh").string();
  std::ofstream(script) << "#!/bin/sh\necho hi\n";
  auto o2 = Run(Req({script}));
  ASSERT_TRUE(o2.exit.ok());
  EXPECT_EQ(o2.exit->value, 126);
}

TEST_F(ExecTest, EnvironmentLayersAndCwd) {
  auto r = Req({"sh", "-c", "echo $FOO $CLOISTER_WORKSPACE $HOME $USER; pwd"});
  r.env = {{"FOO", "bar"}};
  r.cwd = dir_.string();
  auto o = Run(r);
  ASSERT_TRUE(o.exit.ok());
  EXPECT_EQ(o.out, "bar ws1 " + (dir_ / "home").string() + " " + r.user + "\n" + dir_.string() + "\n");
  // Default cwd is the user's home.
  auto o2 = Run(Req({"pwd"}));
  EXPECT_EQ(o2.out, (dir_ / "home").string() + "\n");
}

TEST_F(ExecTest, UnknownUserAndBadCwdAreReportedNotRun) {
  auto r = Req({"true"});
  r.user = "mallory";
  auto o = Run(r);
  ASSERT_FALSE(o.exit.ok());
  EXPECT_EQ(o.exit.error().code(), ErrorCode::kFailedPrecondition);
  EXPECT_NE(o.exit.error().message().find("no user 'mallory'"), std::string::npos);
  auto r2 = Req({"true"});
  r2.cwd = "/nonexistent-dir-xyz";
  auto o2 = Run(r2);
  ASSERT_FALSE(o2.exit.ok());
  EXPECT_NE(o2.exit.error().message().find("chdir /nonexistent-dir-xyz"), std::string::npos);
}

TEST_F(ExecTest, RunsAsTheRequestedUser) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to switch users";
  auto r = Req({"sh", "-c", "id -u; id -g; id -G"});
  r.user = "dev";
  auto o = Run(r);
  ASSERT_TRUE(o.exit.ok()) << o.exit.error().message();
  EXPECT_EQ(o.out, "1000\n1000\n1000 10\n");
  auto o2 = Run(Req({"id", "-u"}));
  EXPECT_EQ(o2.out, "0\n");
}

TEST_F(ExecTest, SignalsAreForwardedAndDeathBySignalIsReported) {
  ExecControl control;
  auto fd = host_->Open(channel::kExecService, {});
  ASSERT_TRUE(fd.ok());
  Collector out, err;
  ExecIo io{-1, out.write_fd(), err.write_fd()};
  Result<ExecExit> exit = Error(ErrorCode::kInternal, "");
  std::thread runner([&] {
    exit = channel::RunExec(*fd, Req({"sh", "-c", "trap 'echo got-term; exit 7' TERM; echo ready; "
                                                  "while :; do sleep 0.05; done"}),
                            io, &control);
  });
  ASSERT_TRUE(out.WaitFor("ready"));
  control.Signal(SIGTERM);
  runner.join();
  close(*fd);
  ASSERT_TRUE(exit.ok()) << exit.error().message();
  EXPECT_EQ(exit->value, 7);
  EXPECT_NE(out.Finish().find("got-term"), std::string::npos);

  auto o = Run(Req({"sh", "-c", "kill -KILL $$"}));
  ASSERT_TRUE(o.exit.ok());
  EXPECT_TRUE(o.exit->signaled);
  EXPECT_EQ(o.exit->value, SIGKILL);
  EXPECT_EQ(o.exit->ShellCode(), 137);
}

TEST_F(ExecTest, PtyHasTheWindowSizeAndFollowsResize) {
  ExecControl control;
  auto fd = host_->Open(channel::kExecService, {});
  ASSERT_TRUE(fd.ok());
  Collector out, err;
  int in[2];
  ASSERT_EQ(pipe2(in, O_CLOEXEC), 0);
  ExecIo io{in[0], out.write_fd(), err.write_fd()};
  auto r = Req({"sh", "-c", "stty size; tty >/dev/null && echo is-a-tty; read x; stty size; exit 3"});
  r.tty = true;
  r.rows = 30;
  r.cols = 100;
  Result<ExecExit> exit = Error(ErrorCode::kInternal, "");
  std::thread runner([&] { exit = channel::RunExec(*fd, r, io, &control); });
  ASSERT_TRUE(out.WaitFor("30 100\r\n"));
  ASSERT_TRUE(out.WaitFor("is-a-tty"));
  control.Resize(50, 132);
  ASSERT_EQ(write(in[1], "go\n", 3), 3);
  ASSERT_TRUE(out.WaitFor("50 132\r\n"));
  runner.join();
  close(in[1]);
  close(in[0]);
  close(*fd);
  ASSERT_TRUE(exit.ok()) << exit.error().message();
  EXPECT_EQ(exit->value, 3);
  EXPECT_EQ(err.Finish(), "");  // a pty merges stderr into stdout
}

TEST_F(ExecTest, LoginShellWhenArgvIsEmpty) {
  auto r = Req({});
  r.tty = true;
  auto o = Run(r, std::string("echo $0-marker\nexit 5\n"));
  ASSERT_TRUE(o.exit.ok()) << o.exit.error().message();
  EXPECT_EQ(o.exit->value, 5);
  EXPECT_NE(o.out.find("-sh-marker"), std::string::npos);  // argv0 "-sh": a login shell
}

TEST_F(ExecTest, ConcurrentExecsKeepTheirOwnOutputAndCodes) {
  std::vector<std::thread> threads;
  std::atomic<int> good{0};
  for (int i = 0; i < 12; ++i) {
    threads.emplace_back([&, i] {
      auto o = Run(Req({"sh", "-c", "echo out-$0; exit $0", std::to_string(i)}));
      if (o.exit.ok() && o.exit->value == i && o.out == "out-" + std::to_string(i) + "\n") ++good;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(good.load(), 12);
}

TEST_F(ExecTest, CommandIsHungUpWhenTheClientGoesAway) {
  // A killed `cloister exec` must not leave its command running in the guest.
  auto fd = host_->Open(channel::kExecService, {});
  ASSERT_TRUE(fd.ok());
  std::string marker = (dir_ / "got-hup").string();
  std::string msg;
  channel::EncodeExecMessage(
      channel::ExecMsg::kRequest,
      channel::EncodeExecRequest(Req({"sh", "-c", "trap 'echo hup > " + marker +
                                                      "; exit 1' HUP; echo ready; "
                                                      "while :; do sleep 0.05; done"})),
      msg);
  ASSERT_EQ(write(*fd, msg.data(), msg.size()), static_cast<ssize_t>(msg.size()));
  std::string seen;
  auto deadline = std::chrono::steady_clock::now() + 20s;
  while (seen.find("ready") == std::string::npos && std::chrono::steady_clock::now() < deadline) {
    pollfd p{*fd, POLLIN, 0};
    if (poll(&p, 1, 100) <= 0) continue;
    char buf[1024];
    ssize_t n = read(*fd, buf, sizeof buf);
    if (n <= 0) break;
    seen.append(buf, static_cast<size_t>(n));
  }
  ASSERT_NE(seen.find("ready"), std::string::npos);
  close(*fd);  // the client dies
  deadline = std::chrono::steady_clock::now() + 20s;
  while (!std::filesystem::exists(marker) && std::chrono::steady_clock::now() < deadline) {
    pollfd none{-1, 0, 0};
    poll(&none, 0, 20);  // the file appears asynchronously; nothing to wait on but time
  }
  EXPECT_TRUE(std::filesystem::exists(marker));
}

// A hostile guest on the other end of an exec stream: the client must fail cleanly.
TEST(ExecClientTest, MalformedOrTruncatedGuestOutputFailsCleanly) {
  auto run_against = [](const std::string& guest_bytes) {
    int sv[2];
    EXPECT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    EXPECT_EQ(write(sv[1], guest_bytes.data(), guest_bytes.size()),
              static_cast<ssize_t>(guest_bytes.size()));
    shutdown(sv[1], SHUT_WR);
    int null = open("/dev/null", O_WRONLY | O_CLOEXEC);
    ExecRequest r;
    r.argv = {"true"};
    auto res = channel::RunExec(sv[0], r, ExecIo{-1, null, null});
    close(null);
    close(sv[0]);
    close(sv[1]);
    return res;
  };
  std::string huge;
  channel::EncodeExecMessage(channel::ExecMsg::kStdout, "", huge);
  huge[1] = 0x7f;  // length 0x7f000000
  auto r1 = run_against(huge);
  ASSERT_FALSE(r1.ok());
  EXPECT_EQ(r1.error().code(), ErrorCode::kCorrupt);
  EXPECT_NE(r1.error().message().find("exceeds its limit"), std::string::npos);

  std::string wrong_dir;
  channel::EncodeExecMessage(channel::ExecMsg::kStdin, "x", wrong_dir);
  EXPECT_EQ(run_against(wrong_dir).error().code(), ErrorCode::kCorrupt);

  std::string bad_exit;
  channel::EncodeExecMessage(channel::ExecMsg::kExit, std::string("\x00\x00\x00\x01\x00", 5), bad_exit);
  EXPECT_EQ(run_against(bad_exit).error().code(), ErrorCode::kCorrupt);  // code 256

  std::string no_exit;
  channel::EncodeExecMessage(channel::ExecMsg::kStdout, "partial", no_exit);
  auto r4 = run_against(no_exit);
  ASSERT_FALSE(r4.ok());
  EXPECT_EQ(r4.error().code(), ErrorCode::kUnavailable);
}

TEST(UsersTest, LooksUpUsersAndSupplementaryGroups) {
  auto dir = std::filesystem::temp_directory_path() / ("cloister-users-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "passwd") << "# comment\nbroken line\nroot:x:0:0::/root:/bin/sh\n"
                                << "dev:x:1000:1000:Dev:/home/dev:/bin/bash\n";
  std::ofstream(dir / "group") << "dev:x:1000:\nsudo:x:27:alice,dev\ndocker:x:999:alice\n";
  auto u = LookupUser("dev", (dir / "passwd").string(), (dir / "group").string());
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->uid, 1000u);
  EXPECT_EQ(u->home, "/home/dev");
  EXPECT_EQ(u->shell, "/bin/bash");
  EXPECT_EQ(u->groups, (std::vector<gid_t>{1000, 27}));
  EXPECT_EQ(LookupUser("nobody", (dir / "passwd").string()).error().code(), ErrorCode::kNotFound);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace cloister::guest

namespace cloister::guest {
namespace {

// The CLI path end to end: RunExecInTerminal on a real terminal (a pty that is the child's
// controlling tty): raw mode while it runs, the terminal's size as the initial window, SIGWINCH
// forwarded as a resize, the exit code returned, and the terminal restored afterwards.
TEST(ExecTerminalTest, RawModeWindowSizeAndSigwinchReachTheGuestPty) {
  int master = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
  ASSERT_GE(master, 0);
  ASSERT_EQ(grantpt(master), 0);
  ASSERT_EQ(unlockpt(master), 0);
  std::string slave_name = ptsname(master);
  winsize ws{};
  ws.ws_row = 20;
  ws.ws_col = 70;
  ASSERT_EQ(ioctl(master, TIOCSWINSZ, &ws), 0);
  termios before{};
  ASSERT_EQ(tcgetattr(master, &before), 0);
  ASSERT_TRUE(before.c_lflag & ICANON);

  pid_t pid = fork();  // before any thread exists in this test
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    // Only this thread takes SIGWINCH (the muxes' threads inherit the block), as in the CLI
    // where the process has no other threads.
    sigset_t winch;
    sigemptyset(&winch);
    sigaddset(&winch, SIGWINCH);
    pthread_sigmask(SIG_BLOCK, &winch, nullptr);
    setsid();
    int slave = open(slave_name.c_str(), O_RDWR);
    if (slave < 0) _exit(100);
    ioctl(slave, TIOCSCTTY, 0);
    dup2(slave, 0);
    dup2(slave, 1);
    int sv[2];
    socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv);
    MuxOptions h, g;
    g.role = MuxRole::kGuest;
    auto host = Mux::Create(sv[0], h).value();
    auto guest = Mux::Create(sv[1], g).value();
    ExecServerOptions so;
    so.switch_user = false;
    guest->RegisterService(channel::kExecService, [&so](int fd, const std::vector<std::string>&) {
      std::thread([fd, &so] { ServeExec(fd, so); }).detach();
    });
    if (!host->Start().ok() || !guest->Start().ok()) _exit(101);
    auto fd = host->Open(channel::kExecService, {});
    if (!fd.ok()) _exit(102);
    ExecRequest r;
    r.user = "root";
    r.argv = {"sh", "-c", "stty size; read x; stty size; exit 9"};
    r.tty = true;
    pthread_sigmask(SIG_UNBLOCK, &winch, nullptr);
    auto code = channel::RunExecInTerminal(*fd, r, /*interactive=*/true);
    _exit(code.ok() ? *code : 103);
  }
  std::string seen;
  auto wait_for = [&](const std::string& needle) {
    auto deadline = std::chrono::steady_clock::now() + 20s;
    while (seen.find(needle) == std::string::npos && std::chrono::steady_clock::now() < deadline) {
      pollfd p{master, POLLIN, 0};
      if (poll(&p, 1, 100) <= 0) continue;
      char buf[4096];
      ssize_t n = read(master, buf, sizeof buf);
      if (n <= 0) break;
      seen.append(buf, static_cast<size_t>(n));
    }
    return seen.find(needle) != std::string::npos;
  };
  EXPECT_TRUE(wait_for("20 70")) << seen;
  termios during{};
  ASSERT_EQ(tcgetattr(master, &during), 0);
  EXPECT_FALSE(during.c_lflag & ICANON);  // raw while the session runs
  EXPECT_FALSE(during.c_lflag & ECHO);
  ws.ws_row = 40;
  ws.ws_col = 120;
  ASSERT_EQ(ioctl(master, TIOCSWINSZ, &ws), 0);  // the kernel sends SIGWINCH to the client
  // The client's SIGWINCH handler has run before it reads this keystroke, and resizes go out
  // before stdin, so the second `stty size` sees the new size.
  ASSERT_EQ(write(master, "\r", 1), 1);
  EXPECT_TRUE(wait_for("40 120")) << seen;
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 9);
  termios after{};
  ASSERT_EQ(tcgetattr(master, &after), 0);
  EXPECT_TRUE(after.c_lflag & ICANON);  // restored
  close(master);
}

}  // namespace
}  // namespace cloister::guest
