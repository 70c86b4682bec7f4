// The CLI against a "remote" cloister over a real sshd on 127.0.0.1 (its own host key, one
// authorised test key), with a second store as the remote's. The local side runs the real
// cloister binary with the user's ssh (here ssh -F <test config>, through CLOISTER_SSH_COMMAND).
#include "cli/remote.h"

#include "cli/cli.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "base/strings.h"
#include "base/subprocess.h"
#include "cli/remote_testing.h"
#include "cli/testing.h"
#include "cli/version.h"

namespace cloister::cli {
namespace {

namespace fs = std::filesystem;

TEST(RemoteUrlTest, ParsesSshUrlsAndRefusesTheRest) {
  auto t = ParseRemoteUrl("ssh://dev@build-box.lan:2222");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->user, "dev");
  EXPECT_EQ(t->host, "build-box.lan");
  EXPECT_EQ(t->port, "2222");
  EXPECT_EQ(t->url(), "ssh://dev@build-box.lan:2222");
  auto v6 = ParseRemoteUrl("ssh://[::1]:22");
  ASSERT_TRUE(v6.ok());
  EXPECT_EQ(v6->host, "::1");
  EXPECT_EQ(ParseRemoteUrl("ssh://box")->port, "");
  for (const char* bad : {"box", "http://box", "ssh://", "ssh://-oProxyCommand=x", "ssh://a b",
                          "ssh://box:0", "ssh://box:99999", "ssh://box:2x", "ssh://-l@box",
                          "ssh://u;rm@box", "ssh://[::1"}) {
    EXPECT_FALSE(ParseRemoteUrl(bad).ok()) << bad;
  }
}

// Every argument reaches the remote verbatim through the remote shell.
TEST(RemoteUrlTest, ArgumentsSurviveTheRemoteShell) {
  std::vector<std::string> words = {"plain", "two words", "it's", "$HOME", "`id`", "a\"b", "\\n",
                                    "*", ";", "", "--", "-x", "new\nline"};
  std::string cmd = "printf '%s\\0'";
  for (const std::string& w : words) cmd += " " + ShellQuote(w);
  auto r = RunProcess({"/bin/sh", "-c", cmd});
  ASSERT_TRUE(r.ok());
  std::vector<std::string> got;
  std::string cur;
  for (char c : r->out) {
    if (c == '\0') {
      got.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  EXPECT_EQ(got, words);
}

// SECURITY: the forwards `run -p/--auto-ports` through a remote tunnels here are only the
// well-formed ones of the remote's answer: integer ports in range (never a float, a negative, a
// string), a string origin.
TEST(RemoteForwardsTest, OnlyWellFormedForwardsAreKept) {
  nlohmann::json answer = nlohmann::json::parse(R"({"ports":[
      {"host_port":40123,"guest_port":80,"origin":"config"},
      {"host_port":1e12,"guest_port":80,"origin":"config"},
      {"host_port":-22,"guest_port":80,"origin":"auto"},
      {"host_port":70000,"guest_port":80,"origin":"auto"},
      {"host_port":0,"guest_port":80,"origin":"auto"},
      {"host_port":3000.5,"guest_port":80,"origin":"auto"},
      {"host_port":41000,"guest_port":"80","origin":"auto"},
      {"host_port":41001,"guest_port":81,"origin":7},
      {"host_port":41002,"guest_port":81},
      "not an object",
      {"host_port":41003,"guest_port":3000,"origin":"auto"}]})");
  auto fwd = ParseRemoteForwards(answer);
  ASSERT_EQ(fwd.size(), 2u);
  EXPECT_EQ(fwd[0].remote_port, 40123);
  EXPECT_EQ(fwd[0].guest_port, 80);
  EXPECT_EQ(fwd[0].origin, "config");
  EXPECT_EQ(fwd[1].remote_port, 41003);
  EXPECT_EQ(fwd[1].origin, "auto");
  EXPECT_TRUE(ParseRemoteForwards(nlohmann::json::parse(R"({"ports":{"host_port":1}})")).empty());
  EXPECT_TRUE(ParseRemoteForwards(nlohmann::json::parse("[1,2]")).empty());
}

// SECURITY (issue 37 item 5): `run --auto-ports` through a remote never listens here on the
// remote's port number (the guest's choice); a -p keeps the HOST_PORT the user wrote.
TEST(RemoteForwardsTest, AutoForwardsGetALocalPortThisMachinePicks) {
  for (int remote : {5432, 6379, 11434, 3128, 41003}) {
    EXPECT_EQ(LocalPortFor({remote, remote, "auto"}, 0), 0) << remote;
    EXPECT_EQ(LocalPortFor({remote, remote, "auto"}, 8080), 0) << remote;
    EXPECT_EQ(LocalPortFor({remote, remote, "added"}, 0), 0) << remote;
  }
  EXPECT_EQ(LocalPortFor({40123, 80, "config"}, 8080), 8080);  // -p 8080:80 as written
  EXPECT_EQ(LocalPortFor({40123, 80, "config"}, 0), 0);        // -p 0:80: any free one
}

TEST(RemoteUrlTest, RemoteSideRefusesOtherVersions) {
  EXPECT_TRUE(CheckRemoteClient(std::to_string(kRemoteProtocolVersion), kCloisterVersion).ok());
  Status old = CheckRemoteClient(std::to_string(kRemoteProtocolVersion), "0.0.9");
  ASSERT_FALSE(old.ok());
  EXPECT_NE(old.error().message().find("0.0.9"), std::string::npos);
  EXPECT_NE(old.error().message().find(kCloisterVersion), std::string::npos);
  EXPECT_FALSE(CheckRemoteClient("999", kCloisterVersion).ok());
}

using testing::ReadText;
using testing::WriteText;

class RemoteTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!testing::LoopbackSshd::Available()) {
      GTEST_SKIP() << "needs openssh-server and root (sshd privilege separation)";
    }
    remote_store_ = std::make_unique<testing::TempStore>("remote");
    exe_ = std::string(getenv("CLOISTER_BINARY_DIR")) + "/src/cli/cloister";
    ASSERT_TRUE(fs::exists(exe_)) << exe_;
    Status st = sshd_.Start(remote_store_->root(), exe_);
    ASSERT_TRUE(st.ok()) << st.error().ToString();
    dir_ = sshd_.dir();
    port_ = sshd_.port();
    sshd_pid_ = sshd_.pid();
    local_store_ = std::make_unique<testing::TempStore>("local");
    url_ = sshd_.url();
  }

  RunOptions Env(const std::string& input = "") const {
    RunOptions ro;
    ro.stdin_data = input;
    ro.env_set = {{"CLOISTER_SSH_COMMAND", "ssh -F " + (dir_ / "ssh_config").string()},
                  {"XDG_CONFIG_HOME", (dir_ / "config").string()},
                  {"CLOISTER_HOME", local_store_->root()},
                  {"XDG_RUNTIME_DIR", (dir_ / "run").string()}};
    ro.env_unset = {"CLOISTER_HOST", "CLOISTER_CONTEXT"};
    ro.timeout = std::chrono::seconds(120);
    return ro;
  }
  RunOutput Cloister(std::vector<std::string> args, const std::string& input = "") const {
    args.insert(args.begin(), exe_);
    auto r = RunProcess(args, Env(input));
    EXPECT_TRUE(r.ok());
    return r.ok() ? *r : RunOutput{};
  }

  testing::LoopbackSshd sshd_;
  fs::path dir_;
  std::string exe_, url_;
  int port_ = -1;
  pid_t sshd_pid_ = -1;
  std::unique_ptr<testing::TempStore> remote_store_, local_store_;
};

TEST_F(RemoteTest, VerbsRunOnTheRemoteWithItsStoreAndExitCodes) {
  ASSERT_EQ(remote_store_->CreateWorkspace("far"), "");
  ASSERT_EQ(local_store_->CreateWorkspace("near"), "");
  // --host: the remote's store, not the local one.
  RunOutput ls = Cloister({"--host", url_, "ls", "--json"});
  ASSERT_EQ(ls.exit_code, 0) << ls.err;
  auto arr = nlohmann::json::parse(ls.out, nullptr, false);
  ASSERT_TRUE(arr.is_array()) << ls.out;
  ASSERT_EQ(arr.size(), 1u);
  EXPECT_EQ(arr[0]["name"], "far");
  // Exit codes pass through: a missing workspace fails there as here.
  RunOutput missing = Cloister({"--host", url_, "describe", "nope"});
  RunOutput missing_here = Cloister({"describe", "nope"});
  EXPECT_NE(missing.exit_code, 0);
  EXPECT_EQ(missing.exit_code, missing_here.exit_code);
  EXPECT_NE(missing.err.find("nope"), std::string::npos) << missing.err;
  // A usage error is a usage error there too.
  EXPECT_EQ(Cloister({"--host", url_, "describe"}).exit_code, kExitUsage);

  // Contexts: add, use, ls --all-contexts with a host column, then back to default.
  RunOutput add = Cloister({"context", "add", "far-box", url_, "--cloister", exe_});
  ASSERT_EQ(add.exit_code, 0) << add.err;
  EXPECT_NE(Cloister({"context", "add", "far-box", url_}).exit_code, 0);  // exists
  EXPECT_NE(Cloister({"context", "add", "x", "http://nope"}).exit_code, 0);
  ASSERT_EQ(Cloister({"context", "use", "far-box"}).exit_code, 0);
  RunOutput via_ctx = Cloister({"describe", "far", "--json"});
  EXPECT_EQ(via_ctx.exit_code, 0) << via_ctx.err;
  RunOutput all = Cloister({"ls", "--all-contexts", "--json"});
  ASSERT_EQ(all.exit_code, 0) << all.err;
  auto rows = nlohmann::json::parse(all.out, nullptr, false);
  ASSERT_TRUE(rows.is_array()) << all.out;
  std::map<std::string, std::string> host_of;
  for (const auto& r : rows) host_of[r.value("name", "")] = r.value("host", "");
  EXPECT_EQ(host_of["near"], "this machine");
  EXPECT_EQ(host_of["far"], url_);
  ASSERT_EQ(Cloister({"context", "use", "default"}).exit_code, 0);
  RunOutput here = Cloister({"ls", "--json"});
  EXPECT_NE(here.out.find("near"), std::string::npos);
  EXPECT_EQ(Cloister({"--context", "nope", "ls"}).exit_code, kExitUsage);
  EXPECT_EQ(Cloister({"--host", "ftp://x", "ls"}).exit_code, kExitUsage);
  ASSERT_EQ(Cloister({"context", "rm", "far-box"}).exit_code, 0);
}

// A secret given to `cred add` crosses only as data on the SSH channel: it is in no argv and no
// environment of any process on this machine (the local and the remote side both) during the call.
TEST_F(RemoteTest, ASecretIsNeverInAnArgvOrEnvironment) {
  ASSERT_EQ(remote_store_->CreateWorkspace("far"), "");
  const std::string secret = "ghp_" + std::string("S3cretRemoteValue0123456789abcdefXYZW");
  std::atomic<bool> done{false};
  std::atomic<int> hits{0}, scans_seeing_remote{0};
  std::thread scanner([&] {
    while (!done) {
      bool saw_remote = false;
      DIR* d = opendir("/proc");
      if (!d) break;
      while (dirent* e = readdir(d)) {
        if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
        for (const char* f : {"cmdline", "environ"}) {
          std::string text = ReadText(fs::path("/proc") / e->d_name / f);
          if (text.find(secret) != std::string::npos) ++hits;
          if (std::string(f) == "cmdline" && text.find("_remote") != std::string::npos &&
              text.find("cred") != std::string::npos) {
            saw_remote = true;
          }
        }
      }
      closedir(d);
      if (saw_remote) ++scans_seeing_remote;
    }
  });
  // The secret arrives on stdin while the remote verb runs; the remote reads it from its stdin.
  RunOptions ro = Env();
  std::vector<std::string> argv = {exe_, "--host", url_, "cred", "add", "far", "github"};
  int in_pipe[2];
  ASSERT_EQ(pipe(in_pipe), 0);
  pid_t pid = fork();
  if (pid == 0) {
    dup2(in_pipe[0], 0);
    close(in_pipe[0]);
    close(in_pipe[1]);
    for (const auto& [k, v] : ro.env_set) setenv(k.c_str(), v.c_str(), 1);
    unsetenv("CLOISTER_HOST");
    std::vector<char*> cargv;
    for (auto& a : argv) cargv.push_back(a.data());
    cargv.push_back(nullptr);
    execv(cargv[0], cargv.data());
    _exit(127);
  }
  close(in_pipe[0]);
  // Give the scanner time to see the remote side waiting for input (bounded).
  for (int i = 0; i < 200 && scans_seeing_remote < 3; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  std::string line = secret + "\n";
  ASSERT_EQ(write(in_pipe[1], line.data(), line.size()), static_cast<ssize_t>(line.size()));
  close(in_pipe[1]);
  int status = 0;
  waitpid(pid, &status, 0);
  done = true;
  scanner.join();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_GE(scans_seeing_remote.load(), 3) << "the scan never overlapped the remote verb";
  EXPECT_EQ(hits.load(), 0);
  // It reached the remote store (only the remote's), as a credential.
  RunOutput creds = Cloister({"--host", url_, "cred", "ls", "far", "--json"});
  EXPECT_EQ(creds.exit_code, 0) << creds.err;
  EXPECT_NE(creds.out.find("github"), std::string::npos) << creds.out;
  EXPECT_EQ(creds.out.find(secret), std::string::npos);
}

TEST_F(RemoteTest, AnotherVersionIsRefusedAndALostConnectionIsSaid) {
  ASSERT_EQ(remote_store_->CreateWorkspace("far"), "");
  // An older client (as its _remote line says it is): refused with both versions and the fix.
  auto old = RunProcess({"ssh", "-F", (dir_ / "ssh_config").string(), "-p", std::to_string(port_),
                         "root@127.0.0.1", ShellQuote(exe_) + " _remote 1 0.0.9 -- ls"});
  ASSERT_TRUE(old.ok());
  EXPECT_NE(old->exit_code, 0);
  EXPECT_NE(old->err.find("0.0.9"), std::string::npos) << old->err;
  EXPECT_NE(old->err.find(kCloisterVersion), std::string::npos) << old->err;
  EXPECT_NE(old->err.find("same cloister version"), std::string::npos) << old->err;

  // The connection dies mid-verb (its sshd session killed): a clear error, the workspace intact.
  RunOptions ro = Env();
  int in_pipe[2];
  ASSERT_EQ(pipe(in_pipe), 0);
  int err_pipe[2];
  ASSERT_EQ(pipe(err_pipe), 0);
  pid_t pid = fork();
  if (pid == 0) {
    dup2(in_pipe[0], 0);
    dup2(err_pipe[1], 2);
    for (int fd : {in_pipe[0], in_pipe[1], err_pipe[0], err_pipe[1]}) close(fd);
    for (const auto& [k, v] : ro.env_set) setenv(k.c_str(), v.c_str(), 1);
    execl(exe_.c_str(), exe_.c_str(), "--host", url_.c_str(), "cred", "add", "far", "github", nullptr);
    _exit(127);
  }
  close(in_pipe[0]);
  close(err_pipe[1]);
  // Wait for the session's remote verb, then kill the sshd processes serving it (not the listener).
  bool killed = false;
  for (int i = 0; i < 200 && !killed; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    DIR* d = opendir("/proc");
    while (dirent* e = readdir(d)) {
      if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
      pid_t p = std::stoi(e->d_name);
      if (p == sshd_pid_) continue;
      std::string cmd = ReadText(fs::path("/proc") / e->d_name / "cmdline");
      std::string stat = ReadText(fs::path("/proc") / e->d_name / "stat");
      // sshd's per-connection children have the listener as parent ("sshd: root@notty").
      std::istringstream ss(stat.substr(stat.rfind(')') + 2));
      std::string state;
      pid_t ppid = 0;
      ss >> state >> ppid;
      if (ppid == sshd_pid_ && cmd.find("sshd") != std::string::npos) {
        kill(p, SIGKILL);
        killed = true;
      }
    }
    closedir(d);
  }
  ASSERT_TRUE(killed);
  std::string err;
  char buf[4096];
  ssize_t n;
  while ((n = read(err_pipe[0], buf, sizeof buf)) > 0) err.append(buf, static_cast<size_t>(n));
  int status = 0;
  waitpid(pid, &status, 0);
  close(in_pipe[1]);
  close(err_pipe[0]);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 255);
  EXPECT_NE(err.find("failed or was lost"), std::string::npos) << err;
  RunOutput ls = Cloister({"--host", url_, "ls", "--json"});
  EXPECT_EQ(ls.exit_code, 0) << ls.err;
  EXPECT_NE(ls.out.find("far"), std::string::npos);
}

// -p names this machine's ports. `create -p` against a remote keeps the specs here (published at
// each start through this machine, remote_vm_test); `run -p` and --auto-ports would publish on the
// remote's loopback instead: refused before anything runs there, with the way that publishes here.
TEST_F(RemoteTest, PublishFlagsThatCannotBePublishedHereAreRefusedBeforeTheRemoteIsAsked) {
  // run -d returns at once, so nothing here would live to carry a tunnel: refused, with the way.
  for (const std::vector<std::string>& flags :
       std::vector<std::vector<std::string>>{{"-p", "8080:80"}, {"-p8080:80"}, {"--publish=8080:80"},
                                             {"--publish", "8080:80"}, {"--auto-ports"}}) {
    std::vector<std::string> args = {"--host", url_, "run", "ws", "-d", "--image", "/nonexistent/disk.raw"};
    args.insert(args.end(), flags.begin(), flags.end());
    RunOutput r = Cloister(args);
    EXPECT_EQ(r.exit_code, kExitUsage) << flags[0] << ": " << r.err;
    EXPECT_NE(r.err.find("create NAME -p SPEC"), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("nonexistent"), std::string::npos) << r.err;  // the remote was not asked
  }
  // run -p reaches the remote (which answers for its own reasons) and leaves no tunnel here.
  RunOutput run = Cloister({"--host", url_, "run", "ws", "--image", "/nonexistent/disk.raw", "-p", "0:80",
                            "--", "true"});
  EXPECT_NE(run.exit_code, 0);
  EXPECT_NE(run.err.find("nonexistent"), std::string::npos) << run.err;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir_ / "run" / "cloister" / "tunnels", ec)) {
    ADD_FAILURE() << "left behind: " << e.path();
  }
  RunOutput bad_run = Cloister({"--host", url_, "run", "ws", "--image", "/nonexistent/disk.raw", "-p", "99999:80"});
  EXPECT_NE(bad_run.exit_code, 0);
  EXPECT_EQ(bad_run.err.find("nonexistent"), std::string::npos) << bad_run.err;
  RunOutput auto_ports = Cloister({"--host", url_, "create", "ws", "--image", "/nonexistent/disk.raw",
                                   "-p", "8080:80", "--auto-ports"});
  EXPECT_EQ(auto_ports.exit_code, kExitUsage) << auto_ports.err;
  // A bad spec is refused here, before the remote is asked.
  RunOutput bad = Cloister({"--host", url_, "create", "ws", "--image", "/nonexistent/disk.raw",
                            "-p", "99999:80"});
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_EQ(bad.err.find("nonexistent"), std::string::npos) << bad.err;
  // create -p reaches the remote without the flag (which answers for its own reasons), and
  // nothing is kept here for a workspace the remote did not create.
  RunOutput kept = Cloister({"--host", url_, "create", "ws", "--image", "/nonexistent/disk.raw",
                             "-p", "8080:80"});
  EXPECT_NE(kept.exit_code, 0);
  EXPECT_NE(kept.err.find("nonexistent"), std::string::npos) << kept.err;
  RunOutput plain = Cloister({"--host", url_, "create", "ws", "--image", "/nonexistent/disk.raw"});
  EXPECT_NE(plain.exit_code, 0);
  EXPECT_EQ(plain.err.find("port NAME add"), std::string::npos) << plain.err;
  EXPECT_NE(plain.err.find("nonexistent"), std::string::npos) << plain.err;
}

// A destructive verb's confirmation is asked on the local terminal (ssh -t: the remote verb's
// prompt on the remote pty, shown and answered here): "n" keeps the workspace, "y" deletes it.
TEST_F(RemoteTest, ConfirmationsAreAskedOnTheLocalTerminal) {
  ASSERT_EQ(remote_store_->CreateWorkspace("far"), "");
  RunOptions ro = Env();
  for (const char* answer : {"n", "y"}) {
    int master = -1;
    winsize ws{24, 80, 0, 0};
    pid_t child = forkpty(&master, nullptr, nullptr, &ws);
    ASSERT_GE(child, 0);
    if (child == 0) {
      for (const auto& [k, v] : ro.env_set) setenv(k.c_str(), v.c_str(), 1);
      unsetenv("CLOISTER_HOST");
      unsetenv("CLOISTER_CONTEXT");
      execl(exe_.c_str(), exe_.c_str(), "--host", url_.c_str(), "rm", "far", nullptr);
      _exit(127);
    }
    std::string screen;
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (screen.find("[y/N]") == std::string::npos && std::chrono::steady_clock::now() < deadline) {
      pollfd p{master, POLLIN, 0};
      if (poll(&p, 1, 1000) <= 0) continue;
      char buf[1024];
      ssize_t n = read(master, buf, sizeof buf);
      if (n <= 0) break;
      screen.append(buf, static_cast<size_t>(n));
    }
    EXPECT_NE(screen.find("Delete workspace 'far'"), std::string::npos) << screen;
    std::string line = std::string(answer) + "\r";
    ASSERT_EQ(write(master, line.data(), line.size()), static_cast<ssize_t>(line.size()));
    // Read to the end (the pty's EOF/EIO) so the child is never blocked on a full terminal.
    char buf[1024];
    while (true) {
      pollfd p{master, POLLIN, 0};
      if (poll(&p, 1, 60000) <= 0) break;
      ssize_t n = read(master, buf, sizeof buf);
      if (n <= 0) break;
      screen.append(buf, static_cast<size_t>(n));
    }
    int status = 0;
    waitpid(child, &status, 0);
    close(master);
    bool kept = fs::exists(fs::path(remote_store_->root()) / "workspaces" / "far");
    if (std::string(answer) == "n") {
      EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) != 0) << screen;
      EXPECT_TRUE(kept) << screen;
    } else {
      EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << screen;
      EXPECT_FALSE(kept) << screen;
    }
  }
}

// port add through a remote checks this machine's port first: a taken one is refused naming it,
// before anything is asked of the remote, and no tunnel is recorded.
TEST_F(RemoteTest, PortAddRefusesATakenLocalPort) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(listen(fd, 1), 0);
  socklen_t len = sizeof a;
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  std::string taken = std::to_string(ntohs(a.sin_port));
  RunOutput r = Cloister({"--host", url_, "port", "ws", "add", "127.0.0.1:" + taken + ":80"});
  close(fd);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("port " + taken + " on 127.0.0.1 is taken on this machine"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("no workspace named"), std::string::npos) << "the remote was asked: " << r.err;
  std::error_code ec;
  EXPECT_TRUE(fs::is_empty(dir_ / "run" / "cloister" / "tunnels", ec) || ec) << "a tunnel was recorded";
}

// A tunnel file names a pid: it is signalled only while that pid is still the ssh that was
// started (its start time matches), never a process that reused the number.
TEST_F(RemoteTest, PortRmNeverSignalsAReusedPid) {
  pid_t victim = fork();
  if (victim == 0) {
    execlp("sleep", "sleep", "600", nullptr);
    _exit(127);
  }
  ASSERT_GT(victim, 0);
  fs::path tunnels = dir_ / "run" / "cloister" / "tunnels";
  fs::create_directories(tunnels);
  chmod((dir_ / "run" / "cloister").c_str(), 0700);
  chmod(tunnels.c_str(), 0700);
  std::string file = (tunnels / ("root@127.0.0.1_" + std::to_string(port_) + ".ws.5555.json")).string();
  WriteText(file, nlohmann::json{{"url", url_}, {"name", "ws"}, {"local_ip", "127.0.0.1"},
                                 {"local_port", 5555}, {"remote_port", 6666}, {"guest_port", 80},
                                 {"pid", victim}, {"start", "1"}}.dump());
  RunOutput r = Cloister({"--host", url_, "port", "ws", "rm", "5555"});
  EXPECT_NE(r.exit_code, 0);  // the remote has no workspace ws: its own answer
  EXPECT_FALSE(fs::exists(file));  // the stale file is gone
  int status = 0;
  EXPECT_EQ(waitpid(victim, &status, WNOHANG), 0) << "the reused pid was signalled";
  kill(victim, SIGKILL);
  waitpid(victim, &status, 0);
}

// A ustar archive of `entries` (name, type '0' file / '2' symlink / '5' dir, link or content).
struct TarEntry {
  std::string name;
  char type;
  std::string data;  // a file's content, a symlink's target
};
std::string UstarOf(const std::vector<TarEntry>& entries) {
  std::string out;
  for (const TarEntry& e : entries) {
    char h[512] = {};
    std::snprintf(h, 100, "%s", e.name.c_str());
    std::snprintf(h + 100, 8, "%07o", e.type == '5' ? 0755 : 0644);
    std::snprintf(h + 108, 8, "%07o", 0);
    std::snprintf(h + 116, 8, "%07o", 0);
    std::snprintf(h + 124, 12, "%011o", e.type == '0' ? static_cast<unsigned>(e.data.size()) : 0u);
    std::snprintf(h + 136, 12, "%011o", 1700000000u);
    std::memset(h + 148, ' ', 8);
    h[156] = e.type;
    if (e.type == '2') std::snprintf(h + 157, 100, "%s", e.data.c_str());
    std::memcpy(h + 257, "ustar", 6);
    std::memcpy(h + 263, "00", 2);
    unsigned sum = 0;
    for (unsigned char c : h) sum += c;
    std::snprintf(h + 148, 8, "%06o", sum);
    out.append(h, 512);
    if (e.type == '0') {
      out += e.data;
      out.append((512 - e.data.size() % 512) % 512, '\0');
    }
  }
  out.append(1024, '\0');
  return out;
}

// A hostile remote: its "cloister" answers every verb with a prepared file on stdout (a tar for
// cp, JSON for ssh-config's material), whatever the real one would do. The local side's own
// checks are all that stands between it and this machine's files.
class HostileRemoteTest : public RemoteTest {
 protected:
  void SetUp() override {
    RemoteTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    fake_ = dir_ / "fake-cloister";
    WriteText(fake_, "#!/bin/sh\ncat " + (dir_ / "answer").string() + "\n");
    chmod(fake_.c_str(), 0755);
    ASSERT_EQ(Cloister({"context", "add", "evil", url_, "--cloister", fake_.string()}).exit_code, 0);
  }
  fs::path fake_;
};

// SECURITY: remote -> local cp holds the remote's tar to transfer/'s entry policy on this side:
// no entry lands outside the destination (.., absolute, through a symlink, another top).
TEST_F(HostileRemoteTest, CpFromAHostileRemoteWritesNothingOutsideTheDestination) {
  fs::path dest = dir_ / "dest", outside = dir_ / "outside";
  fs::create_directories(dest);
  fs::create_directories(outside);
  const std::vector<std::vector<TarEntry>> attacks = {
      {{"proj/", '5', ""}, {"proj/../../escaped", '0', "dotdot"}},
      {{"proj/", '5', ""}, {(outside / "escaped").string(), '0', "absolute"}},
      {{"proj/", '5', ""}, {"proj/link", '2', outside.string()}, {"proj/link/escaped", '0', "via link"}},
      {{"proj/", '5', ""}, {"other/escaped", '0', "other top"}},
      {{"proj/", '5', ""}, {"proj/up", '2', "../.."}, {"proj/up/escaped", '0', "via relative link"}},
  };
  int refused = 0;
  for (size_t i = 0; i < attacks.size(); ++i) {
    WriteText(dir_ / "answer", UstarOf(attacks[i]));
    RunOutput r = Cloister({"--context", "evil", "cp", "ws:/home/dev/proj", dest.string()});
    if (r.exit_code != 0) ++refused;
    EXPECT_NE(r.exit_code, 0) << "attack " << i << ": " << r.err;
    for (const fs::path& p : {dir_ / "escaped", outside / "escaped", dir_.parent_path() / "escaped",
                              dest / "escaped", dest / "other"}) {
      EXPECT_FALSE(fs::exists(fs::symlink_status(p))) << "attack " << i << " wrote " << p;
    }
  }
  EXPECT_EQ(refused, static_cast<int>(attacks.size()));
  // The same stream without the attack is copied (the refusals above were the policy's).
  WriteText(dir_ / "answer", UstarOf({{"proj/", '5', ""}, {"proj/a.txt", '0', "fine"}}));
  RunOutput ok = Cloister({"--context", "evil", "cp", "ws:/home/dev/proj", dest.string()});
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
  EXPECT_EQ(ReadText(dest / "proj" / "a.txt"), "fine");
}

// SECURITY: ssh-config writes the remote's host key pin into a known_hosts file here: only one
// "NAME.cloister ssh-ed25519 KEY" line, never a marker or pattern that would trust other hosts.
TEST_F(HostileRemoteTest, SshConfigRefusesAHostilePinAndWritesNone) {
  ASSERT_EQ(RunProcess({"ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", (dir_ / "idekey").string()})->exit_code, 0);
  std::string key = ReadText(dir_ / "idekey");
  std::string pub = Trim(ReadText(dir_ / "idekey.pub"));
  std::string blob = Split(pub, ' ')[1];
  auto material = [&](const std::string& pin) {
    return nlohmann::json{{"identity", key},
                          {"workspaces", {{{"name", "ws"}, {"known_hosts", pin}}}}}.dump();
  };
  fs::path pin_file = dir_ / "config" / "cloister" / "remotes";
  for (const std::string& bad : {"@cert-authority * ssh-ed25519 " + blob, "* ssh-ed25519 " + blob,
                                 "ws.cloister ssh-ed25519 " + blob + "\nevil.example ssh-ed25519 " + blob,
                                 "ws.cloister,github.com ssh-ed25519 " + blob}) {
    WriteText(dir_ / "answer", material(bad));
    RunOutput r = Cloister({"--context", "evil", "ssh-config", "ws"});
    EXPECT_NE(r.exit_code, 0) << bad;
    EXPECT_EQ(r.out.find("Host ws.cloister"), std::string::npos) << r.out;
    std::error_code ec;
    for (const auto& e : fs::recursive_directory_iterator(pin_file, ec)) {
      EXPECT_NE(e.path().extension(), ".known_hosts") << "a pin was written: " << e.path();
      EXPECT_NE(e.path().filename(), "ssh-client") << "a key was written: " << e.path();
    }
  }
  // The well-formed answer gives a block whose ProxyCommand goes through the remote host.
  WriteText(dir_ / "answer", material("ws.cloister ssh-ed25519 " + blob));
  RunOutput good = Cloister({"--context", "evil", "ssh-config", "ws"});
  ASSERT_EQ(good.exit_code, 0) << good.err;
  EXPECT_NE(good.out.find("Host ws.cloister"), std::string::npos) << good.out;
  EXPECT_NE(good.out.find("_ssh-stdio"), std::string::npos) << good.out;
  EXPECT_NE(good.out.find("127.0.0.1"), std::string::npos) << good.out;
}

// A remote whose cloister is a script answering per verb: `port` with ports.json, `ls` with
// ls.json, `run` records its arguments, waits for a release file and echoes its stdin (exit 7),
// `_ssh-material` records its arguments and answers with answer; anything else: answer.
class ScriptedRemoteTest : public RemoteTest {
 protected:
  void SetUp() override {
    RemoteTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    fake_ = dir_ / "scripted-cloister";
    const std::string d = dir_.string();
    WriteText(fake_, "#!/bin/sh\n"
                     "shift 4\n"  // _remote PROTOCOL VERSION --
                     "case \"$1\" in\n"
                     "  port) cat " + d + "/ports.json ;;\n"
                     "  ls) cat " + d + "/ls.json ;;\n"
                     "  run) echo \"$@\" > " + d + "/run-args.tmp; mv " + d + "/run-args.tmp " + d + "/run-args\n"
                     "       i=0; while [ ! -e " + d + "/release ] && [ $i -lt 1200 ]; do sleep 0.1; i=$((i+1)); done\n"
                     "       cat; exit 7 ;;\n"
                     "  _ssh-material) echo \"$@\" > " + d + "/material-args; cat " + d + "/answer ;;\n"
                     "  *) cat " + d + "/answer ;;\n"
                     "esac\n");
    chmod(fake_.c_str(), 0755);
    ASSERT_EQ(Cloister({"context", "add", "fake", url_, "--cloister", fake_.string()}).exit_code, 0);
  }
  fs::path fake_;
};

// A listener on 127.0.0.1 standing in for a forward on the remote's loopback (the test's sshd is
// on this machine): each connection gets `reply`. Bounded accept loop, stopped by the destructor.
class Answerer {
 public:
  explicit Answerer(std::string reply) {
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 && listen(fd_, 8) == 0 &&
        getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) == 0) {
      port_ = ntohs(a.sin_port);
    }
    thread_ = std::thread([this, reply] {
      while (!stop_) {
        pollfd p{fd_, POLLIN, 0};
        if (poll(&p, 1, 200) <= 0) continue;
        int c = accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
        if (c < 0) continue;
        (void)!write(c, reply.data(), reply.size());
        close(c);
      }
    });
  }
  ~Answerer() {
    stop_ = true;
    thread_.join();
    close(fd_);
  }
  int port() const { return port_; }

 private:
  int fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// What 127.0.0.1:port answers ("" when nothing listens or it closes empty).
std::string ReadFrom(int port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(port));
  std::string out;
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) {
    timeval tv{10, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    char buf[256];
    ssize_t n;
    while ((n = read(fd, buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  return out;
}

bool AliveProcess(pid_t pid) {
  std::string stat = ReadText("/proc/" + std::to_string(pid) + "/stat");
  size_t close_paren = stat.rfind(')');
  return close_paren != std::string::npos && stat.compare(close_paren + 2, 1, "Z") != 0;
}

// `run -p` and `--auto-ports` through a remote: the remote gets each -p as 127.0.0.1:0:GUEST (its
// own loopback), this machine tunnels the remote's `config` forwards to the -p ports and its
// `auto` forwards to local ones while the run lives, never one the run did not ask for nor a
// hostile entry; an auto forward the remote drops ends its tunnel; the run's exit code and stdin
// pass through; every tunnel ends with the run.
TEST_F(ScriptedRemoteTest, RunPublishesOnThisMachineWhileTheRunLives) {
  Answerer config_fwd("config-forward\n"), auto_fwd("auto-forward\n"), added_fwd("added-forward\n");
  ASSERT_GT(config_fwd.port(), 0);
  auto ports = [&](bool with_auto) {
    nlohmann::json list = nlohmann::json::array();
    list.push_back({{"host_ip", "127.0.0.1"}, {"host_port", config_fwd.port()}, {"guest_port", 80}, {"origin", "config"}});
    if (with_auto) {
      list.push_back({{"host_ip", "127.0.0.1"}, {"host_port", auto_fwd.port()}, {"guest_port", 3000}, {"origin", "auto"}});
    }
    // Not the run's (a `port add` of someone else), and hostile numbers: no tunnel for any.
    list.push_back({{"host_ip", "127.0.0.1"}, {"host_port", added_fwd.port()}, {"guest_port", 9999}, {"origin", "added"}});
    list.push_back({{"host_port", 1e12}, {"guest_port", 80}, {"origin", "config"}});
    list.push_back({{"host_port", -22}, {"guest_port", 80}, {"origin", "auto"}});
    list.push_back({{"host_port", 70000}, {"guest_port", "80"}, {"origin", "auto"}});
    return nlohmann::json{{"name", "ws"}, {"ports", list}}.dump();
  };
  WriteText(dir_ / "ports.json", ports(true));
  const int hp = testing::FreeLoopbackPort();
  RunOutput run;
  std::thread runner([&] {
    run = Cloister({"--context", "fake", "run", "ws", "-p", "127.0.0.1:" + std::to_string(hp) + ":80",
                    "--auto-ports", "--", "cat"},
                   "stdin-data\n");
  });
  const fs::path tunnels = dir_ / "run" / "cloister" / "tunnels";
  auto tunnel_of = [&](int guest_port) {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(tunnels, ec)) {
      if (e.path().extension() != ".json") continue;
      auto doc = nlohmann::json::parse(ReadText(e.path()), nullptr, false);
      if (doc.is_object() && doc.value("guest_port", 0) == guest_port) return doc;
    }
    return nlohmann::json();
  };
  bool config_up = false, auto_up = false;
  for (int i = 0; i < 600 && !(config_up && auto_up); ++i) {  // bounded: 60 s
    config_up = config_up || ReadFrom(hp) == "config-forward\n";
    auto doc = tunnel_of(3000);
    auto_up = auto_up || (doc.is_object() && ReadFrom(doc.value("local_port", 0)) == "auto-forward\n");
    if (!(config_up && auto_up)) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_TRUE(config_up) << "-p was not published on this machine";
  EXPECT_TRUE(auto_up) << "the remote's auto forward was not published on this machine";
  nlohmann::json config_tunnel = tunnel_of(80), auto_tunnel = tunnel_of(3000);
  EXPECT_TRUE(tunnel_of(9999).is_null()) << "a forward the run did not ask for was tunnelled";
  pid_t config_pid = config_tunnel.is_object() ? config_tunnel.value("pid", 0) : 0;
  pid_t auto_pid = auto_tunnel.is_object() ? auto_tunnel.value("pid", 0) : 0;
  EXPECT_GT(config_pid, 0);
  EXPECT_GT(auto_pid, 0);
  // The guest closed port 3000: the remote drops its auto forward, the tunnel here ends.
  WriteText(dir_ / "ports.json", ports(false));
  bool auto_gone = false;
  for (int i = 0; i < 300 && !auto_gone && auto_pid > 0; ++i) {  // bounded: 30 s
    auto_gone = !AliveProcess(auto_pid) && tunnel_of(3000).is_null();
    if (!auto_gone) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_TRUE(auto_gone) << "the tunnel of a dropped auto forward lives on";
  EXPECT_EQ(ReadFrom(hp), "config-forward\n");  // the -p tunnel is still up meanwhile
  // What the remote was asked: -p on its own loopback, --auto-ports as given, never the local port.
  std::string args = ReadText(dir_ / "run-args");
  EXPECT_NE(args.find("-p 127.0.0.1:0:80"), std::string::npos) << args;
  EXPECT_NE(args.find("--auto-ports"), std::string::npos) << args;
  EXPECT_EQ(args.find(std::to_string(hp)), std::string::npos) << args;
  WriteText(dir_ / "release", "");
  runner.join();
  EXPECT_EQ(run.exit_code, 7) << run.err;
  EXPECT_EQ(run.out, "stdin-data\n");
  EXPECT_NE(run.err.find("published 127.0.0.1:" + std::to_string(hp)), std::string::npos) << run.err;
  // Every tunnel ended with the run.
  if (config_pid > 0) EXPECT_FALSE(AliveProcess(config_pid)) << "a tunnel outlived the run";
  EXPECT_EQ(ReadFrom(hp), "");
  EXPECT_TRUE(tunnel_of(80).is_null());
}

// `ssh-config --install` through a remote: the blocks go to remotes/TARGET/ssh_config, which
// ~/.ssh/config Includes at its top (once); a block installed before stays while the remote still
// has the workspace and goes when it does not.
TEST_F(ScriptedRemoteTest, SshConfigInstallWritesTheIncludedFile) {
  ASSERT_EQ(RunProcess({"ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", (dir_ / "idekey").string()})->exit_code, 0);
  std::string key = ReadText(dir_ / "idekey");
  std::string blob = Split(Trim(ReadText(dir_ / "idekey.pub")), ' ')[1];
  auto material = [&](const std::vector<std::string>& names) {
    nlohmann::json ws = nlohmann::json::array();
    for (const std::string& n : names) ws.push_back({{"name", n}, {"known_hosts", n + ".cloister ssh-ed25519 " + blob}});
    return nlohmann::json{{"identity", key}, {"workspaces", ws}}.dump();
  };
  const fs::path home = dir_ / "home";
  fs::create_directories(home / ".ssh");
  WriteText(home / ".ssh" / "config", "Host example\n  User me\n");
  auto install = [&](const std::vector<std::string>& names) {
    std::vector<std::string> args = {exe_, "--context", "fake", "ssh-config", "--install"};
    args.insert(args.end(), names.begin(), names.end());
    RunOptions ro = Env();
    ro.env_set["HOME"] = home.string();
    auto r = RunProcess(args, ro);
    EXPECT_TRUE(r.ok());
    return r.ok() ? *r : RunOutput{};
  };
  WriteText(dir_ / "answer", material({"ws"}));
  RunOutput first = install({"ws"});
  ASSERT_EQ(first.exit_code, 0) << first.err;
  EXPECT_NE(first.out.find("now includes it"), std::string::npos) << first.out;
  fs::path file;
  for (const auto& e : fs::recursive_directory_iterator(dir_ / "config" / "cloister" / "remotes")) {
    if (e.path().filename() == "ssh_config") file = e.path();
  }
  ASSERT_FALSE(file.empty());
  std::string blocks = ReadText(file);
  EXPECT_NE(blocks.find("Host ws.cloister"), std::string::npos) << blocks;
  EXPECT_NE(blocks.find("_ssh-stdio"), std::string::npos) << blocks;
  std::string user_config = ReadText(home / ".ssh" / "config");
  size_t include = user_config.find("Include \"" + file.string() + "\"\n");
  EXPECT_NE(include, std::string::npos) << user_config;
  EXPECT_LT(include, user_config.find("Host example")) << user_config;  // before every Host line
  EXPECT_EQ(ReadText(dir_ / "material-args").find("--keep-pin"), std::string::npos);  // ssh-config re-pins
  // Again with another workspace: ws stays (the remote still has it), the Include is not doubled.
  WriteText(dir_ / "ls.json", R"([{"name":"ws"},{"name":"web"}])");
  WriteText(dir_ / "answer", material({"web", "ws"}));
  RunOutput second = install({"web"});
  ASSERT_EQ(second.exit_code, 0) << second.err;
  EXPECT_NE(second.out.find("already includes it"), std::string::npos) << second.out;
  EXPECT_NE(ReadText(dir_ / "material-args").find("web ws"), std::string::npos) << ReadText(dir_ / "material-args");
  // ws removed on the remote: its block goes at the next install.
  WriteText(dir_ / "ls.json", R"([{"name":"web"}])");
  WriteText(dir_ / "answer", material({"web"}));
  RunOutput third = install({"web"});
  ASSERT_EQ(third.exit_code, 0) << third.err;
  EXPECT_EQ(ReadText(dir_ / "material-args").find("ws"), std::string::npos) << ReadText(dir_ / "material-args");
  EXPECT_EQ(ReadText(file).find("Host ws.cloister"), std::string::npos) << ReadText(file);
  EXPECT_NE(ReadText(file).find("Host web.cloister"), std::string::npos) << ReadText(file);
  std::string again = ReadText(home / ".ssh" / "config");
  EXPECT_EQ(again.find("Include"), again.rfind("Include")) << again;
}

// `ssh NAME` through a remote runs this machine's ssh with the block's options: the material is
// asked with --keep-pin (no re-pin, as the local `ssh`), the ProxyCommand runs `_ssh-stdio NAME`
// on the remote. (The script is no sshd, so ssh fails there: 255; the VM test logs in for real.)
TEST_F(ScriptedRemoteTest, SshRunsTheLocalSshThroughTheRemote) {
  if (!ProgramExists("ssh")) GTEST_SKIP() << "needs openssh-client";
  ASSERT_EQ(RunProcess({"ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", (dir_ / "idekey").string()})->exit_code, 0);
  std::string blob = Split(Trim(ReadText(dir_ / "idekey.pub")), ' ')[1];
  WriteText(dir_ / "answer", nlohmann::json{{"identity", ReadText(dir_ / "idekey")},
                                            {"workspaces", {{{"name", "ws"}, {"known_hosts", "ws.cloister ssh-ed25519 " + blob}}}}}
                                 .dump());
  RunOutput r = Cloister({"--context", "fake", "ssh", "ws", "--", "true"});
  EXPECT_EQ(r.exit_code, 255) << r.err;
  EXPECT_NE(ReadText(dir_ / "material-args").find("--keep-pin ws"), std::string::npos) << ReadText(dir_ / "material-args");
  // A hostile answer about another workspace is refused before ssh runs.
  WriteText(dir_ / "answer", nlohmann::json{{"identity", ReadText(dir_ / "idekey")},
                                            {"workspaces", {{{"name", "other"}, {"known_hosts", "other.cloister ssh-ed25519 " + blob}}}}}
                                 .dump());
  RunOutput other = Cloister({"--context", "fake", "ssh", "ws", "--", "true"});
  EXPECT_NE(other.exit_code, 0);
  EXPECT_NE(other.err.find("not about ws"), std::string::npos) << other.err;
}

}  // namespace
}  // namespace cloister::cli
