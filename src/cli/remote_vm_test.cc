// `--host ssh://...` against a real VM (issue 21's proof), one boot of the test image under TCG:
// a real sshd on 127.0.0.1 (cli/remote_testing.h) whose sessions run cloister on the fixture's
// store (the "remote"), while this side is the same binary with the user's ssh (-F <test
// config>). Through the remote: create, ssh-config (before the boot: the store's client key),
// start; exec with exit codes, signals and stdin; Ctrl-C on the local terminal; exec -t on a local pty whose resize reaches the guest's
// `stty size`; attach and detach (C-b d); cp both ways; a guest HTTP server published on the
// *local* loopback by `port add` (the local ssh -L tunnel carries it; `port ls` shows both ends,
// `port rm` ends it); ssh-config's ProxyCommand used by a real `ssh` to run a command in the
// guest; `ssh NAME` and `ssh-config --install` through the remote, each logging in; a lost connection (its sshd session killed) said clearly with the workspace left
// running; `stop` ending the tunnels. Only loopback traffic.
#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <set>
#include <string>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "base/strings.h"
#include "base/subprocess.h"
#include "cli/remote_testing.h"
#include "supervisor/state.h"
#include "supervisor/testing.h"
#include "supervisor/workspace.h"

namespace cloister::cli {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

// The process is gone (or a zombie nobody reaped yet: it no longer runs).
bool Gone(pid_t pid) {
  std::string stat = vm::testing::Slurp("/proc/" + std::to_string(pid) + "/stat");
  size_t close_paren = stat.rfind(')');
  return close_paren == std::string::npos || stat.compare(close_paren + 2, 1, "Z") == 0;
}

int Connect(int port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(port));
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// GET / over HTTP/1.0 on 127.0.0.1:port; the whole response, "" when refused or closed empty.
std::string HttpGet(int port) {
  int fd = Connect(port);
  if (fd < 0) return "";
  timeval tv{60, 0};  // a bound for a slow TCG guest, not a timing assertion
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  std::string req = "GET / HTTP/1.0\r\nHost: ws\r\n\r\n";
  if (write(fd, req.data(), req.size()) != static_cast<ssize_t>(req.size())) {
    close(fd);
    return "";
  }
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = read(fd, buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
  close(fd);
  return out;
}

class RemoteVmTest : public vm::testing::CliVmTest {
 protected:
  void SetUp() override {
    CliVmTest::SetUp();
    if (HasFatalFailure()) return;
    if (!testing::LoopbackSshd::Available()) GTEST_SKIP() << "needs openssh-server and root";
    env_["CLOISTER_VAULT_KEY_BACKEND"] = "file";
    Status st = sshd_.Start(root_, exe_, {{"CLOISTER_VAULT_KEY_BACKEND", "file"}});
    ASSERT_TRUE(st.ok()) << st.error().ToString();
    for (const auto& [k, v] : sshd_.ClientEnv()) env_[k] = v;
    url_ = sshd_.url();
  }

  // `cloister --host URL ARGS...` (the fixture's --store goes along to the remote, whose store it is).
  RunOutput Remote(std::vector<std::string> args, const std::string& input = "") {
    args.insert(args.begin(), {"--host", url_});
    return Cloister(args, input);
  }

  // Reads the pty until `needle` shows (bounded); true when it did.
  bool ReadUntil(int master, std::string* screen, const std::string& needle, std::chrono::seconds limit) {
    auto deadline = Clock::now() + limit;
    while (screen->find(needle) == std::string::npos) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      if (left.count() <= 0) return false;
      pollfd p{master, POLLIN, 0};
      if (poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
      char buf[4096];
      ssize_t n = read(master, buf, sizeof buf);
      if (n <= 0) return false;
      screen->append(buf, static_cast<size_t>(n));
    }
    return true;
  }

  int WaitChild(pid_t child, std::chrono::seconds limit) {
    int status = -1;
    if (!vm::testing::WaitFor([&] { return waitpid(child, &status, WNOHANG) == child; }, limit)) {
      kill(child, SIGKILL);
      waitpid(child, &status, 0);
      ADD_FAILURE() << "a cloister on a pty did not exit";
    }
    return status;
  }

  testing::LoopbackSshd sshd_;
  std::string url_;
};

TEST_F(RemoteVmTest, EveryHostAccessVerbWorksThroughTheSshConnection) {
  if (!ProgramExists("ssh")) GTEST_SKIP() << "needs openssh-client";
  const fs::path local = sshd_.dir() / "local";
  fs::create_directories(local);

  // create on the remote; ssh-config before the boot makes the remote store's client key, so the
  // guest's sshd accepts it from this start.
  // -p of create names this machine's port: kept here, published at each start through it.
  const int hp0 = testing::FreeLoopbackPort();
  RunOutput created = Remote({"create", "ws", "--image", image_dir() + "/disk.raw", "--memory", "384",
                              "--cpus", "1", "--home-size", "256M", "-p",
                              "127.0.0.1:" + std::to_string(hp0) + ":8081"});
  ASSERT_EQ(created.exit_code, 0) << created.err;
  EXPECT_NE(created.out.find("publishes 127.0.0.1:" + std::to_string(hp0) + ":8081"), std::string::npos)
      << created.out;
  RunOutput cfg = Remote({"ssh-config", "ws"});
  ASSERT_EQ(cfg.exit_code, 0) << cfg.err;
  EXPECT_NE(cfg.out.find("Host ws.cloister"), std::string::npos) << cfg.out;
  EXPECT_NE(cfg.out.find("ProxyCommand 'ssh' '-F'"), std::string::npos) << cfg.out;
  EXPECT_NE(cfg.out.find("_ssh-stdio"), std::string::npos) << cfg.out;
  const std::string cfg_file = (local / "ssh_config").string();
  std::ofstream(cfg_file) << cfg.out;

  RunOutput started = Remote({"start", "ws", "--accel", "tcg"});
  ASSERT_EQ(started.exit_code, 0) << started.err;
  EXPECT_NE(started.err.find("ready"), std::string::npos) << started.err;

  // exec: exit codes and stdin pass through.
  RunOutput seven = Remote({"exec", "ws", "--", "sh", "-c", "echo out; echo err >&2; exit 7"});
  EXPECT_EQ(seven.exit_code, 7);
  EXPECT_EQ(seven.out, "out\n");
  EXPECT_NE(seven.err.find("err"), std::string::npos);
  RunOutput cat = Remote({"exec", "-i", "ws", "--", "sh", "-c", "tr a-z A-Z"}, "through ssh\n");
  EXPECT_EQ(cat.exit_code, 0) << cat.err;
  EXPECT_EQ(cat.out, "THROUGH SSH\n");

  // exec -t on a local pty: the guest's terminal has the local size, and a resize of the local
  // terminal (TIOCSWINSZ -> SIGWINCH -> ssh's window-change -> the remote cloister) reaches it.
  {
    int master = -1;
    pid_t child = SpawnCloisterOnPty({"--host", url_, "exec", "-i", "-t", "ws", "--", "sh", "-c",
                                      "echo A=$(stty size)=; read x; echo B=$(stty size)=; exit 3"},
                                     &master, "", {}, 30, 100);
    ASSERT_GE(child, 0);
    std::string screen;
    EXPECT_TRUE(ReadUntil(master, &screen, "A=30 100=", std::chrono::seconds(180))) << screen;
    winsize ws{40, 120, 0, 0};
    ASSERT_EQ(ioctl(master, TIOCSWINSZ, &ws), 0);
    // The window change travels asynchronously; the line typed afterwards is read after it.
    std::this_thread::sleep_for(std::chrono::seconds(2));  // not an assertion: lets ssh send it
    ASSERT_EQ(write(master, "\r", 1), 1);
    EXPECT_TRUE(ReadUntil(master, &screen, "B=40 120=", std::chrono::seconds(120))) << screen;
    int status = WaitChild(child, std::chrono::seconds(60));
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 3) << status << screen;
    close(master);
  }

  // Signals: a command the guest kills gives 128+signal here; Ctrl-C typed on the local terminal
  // reaches the guest command (ssh -t carries the byte, the guest's pty makes it SIGINT).
  RunOutput killed = Remote({"exec", "ws", "--", "sh", "-c", "kill -TERM $$"});
  EXPECT_EQ(killed.exit_code, 128 + SIGTERM) << killed.err;
  {
    int master = -1;
    pid_t child = SpawnCloisterOnPty({"--host", url_, "exec", "-i", "-t", "ws", "--", "sh", "-c",
                                      "trap 'echo GOT-INT; exit 5' INT; echo READY; "
                                      "while :; do sleep 1; done"},
                                     &master);
    ASSERT_GE(child, 0);
    std::string screen;
    EXPECT_TRUE(ReadUntil(master, &screen, "READY", std::chrono::seconds(180))) << screen;
    ASSERT_EQ(write(master, "\x03", 1), 1);
    EXPECT_TRUE(ReadUntil(master, &screen, "GOT-INT", std::chrono::seconds(60))) << screen;
    int status = WaitChild(child, std::chrono::seconds(60));
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 5) << status << screen;
    close(master);
  }

  // attach on a pty: a shell in the tmux session answers; C-b d detaches, exit 0, VM running.
  {
    int master = -1;
    pid_t child = SpawnCloisterOnPty({"--host", url_, "attach", "ws"}, &master);
    ASSERT_GE(child, 0);
    std::string screen;
    bool typed = false;
    for (int i = 0; i < 20 && !typed; ++i) {
      std::string line = "echo $((6*7))X\r";
      ASSERT_EQ(write(master, line.data(), line.size()), static_cast<ssize_t>(line.size()));
      typed = ReadUntil(master, &screen, "42X", std::chrono::seconds(10));
    }
    EXPECT_TRUE(typed) << screen;
    ASSERT_EQ(write(master, "\x02" "d", 2), 2);  // C-b d
    int status = WaitChild(child, std::chrono::seconds(60));
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status << screen;
    close(master);
    EXPECT_EQ(vm::DeriveStatus(vm::RunPathsFor(*store_, "ws")).state, vm::VmState::kRunning);
  }

  // cp both ways through the connection.
  fs::create_directories(local / "proj" / "sub");
  std::string data;
  for (int i = 0; i < 100000; ++i) data += static_cast<char>('a' + (i * 7) % 26);
  std::ofstream(local / "proj" / "sub" / "big.txt") << data;
  std::ofstream(local / "proj" / "small.txt") << "small";
  RunOutput up = Remote({"cp", (local / "proj").string(), "ws:/home/dev/"});
  ASSERT_EQ(up.exit_code, 0) << up.err;
  EXPECT_NE(up.err.find("copied"), std::string::npos) << up.err;
  int code = -1;
  EXPECT_EQ(Exec("ws", "wc -c < /home/dev/proj/sub/big.txt; cat /home/dev/proj/small.txt", &code),
            "100000\nsmall");
  RunOutput renamed = Remote({"cp", (local / "proj" / "small.txt").string(), "ws:/home/dev/renamed.txt"});
  EXPECT_EQ(renamed.exit_code, 0) << renamed.err;
  EXPECT_EQ(Exec("ws", "cat /home/dev/renamed.txt"), "small");
  fs::create_directories(local / "back");
  RunOutput down = Remote({"cp", "ws:/home/dev/proj", (local / "back").string()});
  ASSERT_EQ(down.exit_code, 0) << down.err;
  EXPECT_EQ(vm::testing::Slurp((local / "back" / "proj" / "sub" / "big.txt").string()), data);
  RunOutput down_file = Remote({"cp", "ws:renamed.txt", (local / "one.txt").string()});
  EXPECT_EQ(down_file.exit_code, 0) << down_file.err;
  EXPECT_EQ(vm::testing::Slurp((local / "one.txt").string()), "small");
  RunOutput missing = Remote({"cp", "ws:/nope/x", (local / "back").string()});
  EXPECT_NE(missing.exit_code, 0);
  EXPECT_NE(missing.err.find("/nope"), std::string::npos) << missing.err;  // the guest tar's reason

  // A guest HTTP server published on this machine's loopback through the tunnel.
  Exec("ws", "mkdir -p /tmp/www && echo remote-page > /tmp/www/index.html && "
             "busybox httpd -p 8081 -h /tmp/www", &code);
  ASSERT_EQ(code, 0);
  int hp = testing::FreeLoopbackPort();
  RunOutput add = Remote({"port", "ws", "add", "127.0.0.1:" + std::to_string(hp) + ":8081", "--json"});
  ASSERT_EQ(add.exit_code, 0) << add.err;
  json added = json::parse(add.out, nullptr, false);
  ASSERT_TRUE(added.is_object()) << add.out;
  ASSERT_EQ(added["added"].size(), 1u) << add.out;
  int rp = added["added"][0].value("remote_port", 0);
  pid_t tunnel_pid = added["added"][0].value("pid", 0);
  EXPECT_NE(rp, hp);
  EXPECT_GT(tunnel_pid, 0);
  EXPECT_NE(vm::testing::Slurp("/proc/" + std::to_string(tunnel_pid) + "/cmdline").find("-L"),
            std::string::npos);
  EXPECT_NE(HttpGet(hp).find("remote-page"), std::string::npos);
  EXPECT_NE(HttpGet(hp0).find("remote-page"), std::string::npos) << "create -p was not published";
  RunOutput ls = Remote({"port", "ws", "ls", "--json"});
  ASSERT_EQ(ls.exit_code, 0) << ls.err;
  json listed = json::parse(ls.out, nullptr, false);
  ASSERT_TRUE(listed.is_object()) << ls.out;
  ASSERT_EQ(listed["local"].size(), 2u) << ls.out;  // create -p's and port add's
  std::set<int> local_ports;
  for (const json& l : listed["local"]) local_ports.insert(l.value("local_port", 0));
  EXPECT_EQ(local_ports, (std::set<int>{hp0, hp})) << ls.out;
  bool remote_end = false;
  for (const json& p : listed["ports"]) remote_end |= p.value("host_port", 0) == rp;
  EXPECT_TRUE(remote_end) << ls.out;
  RunOutput table = Remote({"port", "ws"});
  EXPECT_NE(table.out.find("127.0.0.1:" + std::to_string(hp)), std::string::npos) << table.out;
  EXPECT_NE(table.out.find("127.0.0.1:" + std::to_string(rp)), std::string::npos) << table.out;
  RunOutput rm = Remote({"port", "ws", "rm", std::to_string(hp)});
  EXPECT_EQ(rm.exit_code, 0) << rm.err;
  EXPECT_TRUE(vm::testing::WaitFor([&] { return Connect(hp) < 0; }, std::chrono::seconds(10)));
  EXPECT_EQ(Connect(rp), -1);  // the remote's forward went too
  EXPECT_TRUE(Gone(tunnel_pid));

  // ssh-config's ProxyCommand through the remote, by a real ssh.
  RunOptions ro;
  ro.timeout = std::chrono::seconds(300);
  auto viassh = RunProcess({"ssh", "-F", cfg_file, "-o", "BatchMode=yes", "ws.cloister",
                            "echo via-remote; id -un"}, ro);
  ASSERT_TRUE(viassh.ok());
  EXPECT_EQ(viassh->exit_code, 0) << viassh->err;
  EXPECT_EQ(viassh->out, "via-remote\ndev\n");

  // `ssh NAME` through the remote: this machine's ssh with the block's options (the ProxyCommand
  // through the remote, the remote's pin kept); the exit code is the command's.
  RunOutput viacli = Remote({"ssh", "ws", "--", "sh", "-c", "'echo via-cloister-ssh; exit 9'"});
  EXPECT_EQ(viacli.exit_code, 9) << viacli.err;
  EXPECT_EQ(viacli.out, "via-cloister-ssh\n") << viacli.err;
  // ssh-config --install through the remote: ~/.ssh/config Includes the remote's blocks, and a
  // real ssh reading only that file logs in.
  {
    const fs::path home = local / "home";
    fs::create_directories(home);
    auto saved = env_.find("HOME") == env_.end() ? std::optional<std::string>() : env_["HOME"];
    env_["HOME"] = home.string();
    RunOutput installed = Remote({"ssh-config", "--install", "ws"});
    if (saved) env_["HOME"] = *saved; else env_.erase("HOME");
    ASSERT_EQ(installed.exit_code, 0) << installed.err;
    EXPECT_NE(installed.out.find("ssh ws.cloister"), std::string::npos) << installed.out;
    auto viainclude = RunProcess({"ssh", "-F", (home / ".ssh" / "config").string(), "-o", "BatchMode=yes",
                                  "ws.cloister", "echo via-include"}, ro);
    ASSERT_TRUE(viainclude.ok());
    EXPECT_EQ(viainclude->exit_code, 0) << viainclude->err;
    EXPECT_EQ(viainclude->out, "via-include\n");
  }

  // A lost connection mid-verb: said clearly, the workspace left running.
  {
    int err_pipe[2];
    ASSERT_EQ(pipe(err_pipe), 0);
    pid_t child = fork();
    if (child == 0) {
      dup2(err_pipe[1], 2);
      close(err_pipe[0]);
      close(err_pipe[1]);
      for (const auto& [k, v] : env_) setenv(k.c_str(), v.c_str(), 1);
      execl(exe_.c_str(), exe_.c_str(), "--host", url_.c_str(), "exec", "ws", "--", "sleep", "600",
            nullptr);
      _exit(127);
    }
    close(err_pipe[1]);
    bool killed = false;
    for (int i = 0; i < 600 && !killed; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));  // polling /proc, bounded
      bool remote_side_up = false;
      std::vector<pid_t> sessions;
      DIR* d = opendir("/proc");
      while (dirent* e = readdir(d)) {
        if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
        pid_t p = std::stoi(e->d_name);
        std::string cmd = vm::testing::Slurp("/proc/" + std::string(e->d_name) + "/cmdline");
        if (cmd.find("_remote") != std::string::npos && cmd.find("sleep") != std::string::npos &&
            cmd.find("ssh") == std::string::npos) {
          remote_side_up = true;
        }
        std::string stat = vm::testing::Slurp("/proc/" + std::string(e->d_name) + "/stat");
        size_t close_paren = stat.rfind(')');
        if (close_paren == std::string::npos || p == sshd_.pid()) continue;
        std::istringstream ss(stat.substr(close_paren + 2));
        std::string state;
        pid_t ppid = 0;
        ss >> state >> ppid;
        if (ppid == sshd_.pid() && cmd.find("sshd") != std::string::npos) sessions.push_back(p);
      }
      closedir(d);
      if (remote_side_up && !sessions.empty()) {
        for (pid_t p : sessions) kill(p, SIGKILL);
        killed = true;
      }
    }
    ASSERT_TRUE(killed);
    std::string err;
    char buf[4096];
    ssize_t n;
    while ((n = read(err_pipe[0], buf, sizeof buf)) > 0) err.append(buf, static_cast<size_t>(n));
    close(err_pipe[0]);
    int status = WaitChild(child, std::chrono::seconds(60));
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 255) << status;
    EXPECT_NE(err.find("failed or was lost"), std::string::npos) << err;
  }
  EXPECT_EQ(vm::DeriveStatus(vm::RunPathsFor(*store_, "ws")).state, vm::VmState::kRunning);
  RunOutput after = Remote({"exec", "ws", "--", "echo", "still-here"});
  EXPECT_EQ(after.exit_code, 0) << after.err;
  EXPECT_EQ(after.out, "still-here\n");

  // stop through the remote ends this machine's tunnels of the workspace.
  int hp2 = testing::FreeLoopbackPort();
  RunOutput add2 = Remote({"port", "ws", "add", std::to_string(hp2) + ":8081", "--json"});
  ASSERT_EQ(add2.exit_code, 0) << add2.err;
  json added2 = json::parse(add2.out, nullptr, false);
  pid_t tunnel2 = added2.is_object() && added2["added"].size() == 1 ? added2["added"][0].value("pid", 0) : 0;
  EXPECT_GT(tunnel2, 0);
  EXPECT_NE(HttpGet(hp2).find("remote-page"), std::string::npos);
  RunOutput stopped = Remote({"stop", "ws", "--timeout", "60"});
  EXPECT_EQ(stopped.exit_code, 0) << stopped.err;
  if (tunnel2 > 0) {
    EXPECT_TRUE(Gone(tunnel2));
  }
  EXPECT_EQ(Connect(hp2), -1);
  EXPECT_EQ(Connect(hp0), -1);  // create -p's tunnel ended with the workspace too
  EXPECT_EQ(vm::DeriveStatus(vm::RunPathsFor(*store_, "ws")).state, vm::VmState::kStopped);
}

}  // namespace
}  // namespace cloister::cli
