// The lifecycle verbs' refusals and derived state, driven in-process through RunCli against a temp
// store, without booting anything: a compromised workspace does not start (the error names
// `cloister wipe NAME`), a stale pid file (even one naming a live, unrelated process) shows as
// broken with a hint and is cleaned by `stop`, and no verb touches a `-v` host folder. Against a
// fake supervisor (this process holds the pid file's lock and answers on the control socket): a
// paused workspace shows paused and refuses exec/attach/start/reboot/suspend with the table's
// text naming `cloister wipe NAME`, and exec on a booting one waits for READY (bounded).
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sys/socket.h>

#include <atomic>
#include <filesystem>
#include <functional>
#include <map>
#include <sstream>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "base/file_util.h"
#include "cli/cli.h"
#include "channel/exec_proto.h"
#include "cli/testing.h"
#include "store/env.h"
#include "store/store.h"
#include "supervisor/control.h"
#include "supervisor/state.h"

namespace cloister::cli {
namespace {

namespace fs = std::filesystem;

using testing::Outcome;

class LifecycleVerbsTest : public testing::SparseBaseTest {
 protected:
  LifecycleVerbsTest() : SparseBaseTest("/tmp/cl-life.") {}
};

TEST_F(LifecycleVerbsTest, LifecycleVerbsHaveHelp) {
  for (const char* verb : {"start", "stop", "reboot", "exec", "attach", "run"}) {
    Outcome o = Run({verb, "--help"});
    EXPECT_EQ(o.code, 0) << verb;
    EXPECT_NE(o.out.find(std::string("Usage: cloister ") + verb), std::string::npos) << o.out;
  }
  // The supervisor entry point is internal: not listed.
  Outcome top = Run({"--help"});
  EXPECT_EQ(top.out.find("_supervise"), std::string::npos);
}

TEST_F(LifecycleVerbsTest, CompromisedWorkspaceRefusesToBootNamingWipe) {
  ASSERT_EQ(Run({"create", "ws", "--image", base_, "--home-size", "64M"}).code, 0);
  auto store = Store::Open(store_);
  ASSERT_TRUE(store.ok());
  ASSERT_TRUE((*store)->MarkCompromised("ws", "placeholder sent to evil.example").ok());
  for (std::vector<std::string> verb :
       {std::vector<std::string>{"start", "ws", "--accel", "tcg"},
        {"run", "ws", "--accel", "tcg", "--", "true"}}) {
    Outcome o = Run(verb);
    EXPECT_NE(o.code, 0) << verb[0];
    EXPECT_NE(o.err.find("compromised"), std::string::npos) << o.err;
    EXPECT_NE(o.err.find("cloister wipe ws"), std::string::npos) << o.err;
    // Nothing was started: no supervisor ever claimed the pid file.
    EXPECT_FALSE(fs::exists((*store)->Paths("ws").supervisor_pid));
    EXPECT_FALSE(fs::exists((*store)->Paths("ws").console_log));
  }
}

// Words after "--" are the guest command, never run's optional NAME; exec needs a command.
TEST_F(LifecycleVerbsTest, CommandAfterDashesIsNeverTheWorkspaceName) {
  Outcome o = Run({"run", "--rm", "--image", base_, "--accel", "tcg", "--", "echo", "hi"});
  // The fake base image has no kernel, so the boot fails; what matters is which name was made,
  // and that --rm deleted it again.
  EXPECT_NE(o.code, 0);
  EXPECT_NE(o.err.find("created workspace run-"), std::string::npos) << o.err;
  EXPECT_EQ(o.err.find("workspace echo"), std::string::npos) << o.err;
  auto store = Store::Open(store_);
  ASSERT_TRUE(store.ok());
  auto list = (*store)->List();
  ASSERT_TRUE(list.ok());
  EXPECT_TRUE(list->empty());
  Outcome e = Run({"exec", "ws"});
  EXPECT_EQ(e.code, kExitUsage);
  EXPECT_NE(e.err.find("no command"), std::string::npos) << e.err;
}

TEST_F(LifecycleVerbsTest, StalePidFileIsBrokenWithHintAndStopCleansIt) {
  ASSERT_EQ(Run({"create", "ws", "--image", base_, "--home-size", "64M"}).code, 0);
  auto store = Store::Open(store_);
  ASSERT_TRUE(store.ok());
  WorkspacePaths p = (*store)->Paths("ws");
  fs::create_directories(p.run_dir);
  // Our own pid: alive (kill(pid, 0) succeeds), as after pid reuse, but it holds no supervisor
  // lock on the file. A check by pid alone would call this running.
  ASSERT_TRUE(WriteFileAtomic(p.supervisor_pid, std::to_string(getpid()) + "\n", 0644).ok());
  ASSERT_TRUE(WriteFileAtomic(p.supervisor_socket, "", 0600).ok());

  Outcome ls = Run({"ls", "--json"});
  ASSERT_EQ(ls.code, 0) << ls.err;
  nlohmann::json l = ls.json();
  ASSERT_EQ(l.size(), 1u);
  EXPECT_EQ(l[0]["state"], "broken");
  EXPECT_NE(l[0].value("hint", "").find("cloister stop ws"), std::string::npos) << l.dump();
  Outcome human = Run({"ls"});
  EXPECT_NE(human.out.find("broken"), std::string::npos) << human.out;
  EXPECT_NE(human.out.find("cloister stop ws"), std::string::npos) << human.out;
  Outcome d = Run({"describe", "ws", "--json"});
  ASSERT_EQ(d.code, 0) << d.err;
  EXPECT_EQ(d.json()["state"], "broken");

  // exec refuses with the state, not a hang.
  Outcome e = Run({"exec", "ws", "--", "true"});
  EXPECT_NE(e.code, 0);
  EXPECT_NE(e.err.find("not running"), std::string::npos) << e.err;

  Outcome stop = Run({"stop", "ws"});
  EXPECT_EQ(stop.code, 0) << stop.err;
  EXPECT_FALSE(fs::exists(p.supervisor_pid));
  EXPECT_FALSE(fs::exists(p.supervisor_socket));
  ls = Run({"ls", "--json"});
  EXPECT_EQ(ls.json()[0]["state"], "stopped");
  // We are still alive: stop never signals the pid a stale file names.
  EXPECT_EQ(kill(getpid(), 0), 0);
}

// Every file's path, mode, size, mtime and content under `root`.
std::map<std::string, std::string> Snapshot(const std::string& root) {
  std::map<std::string, std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(root)) {
    struct stat st;
    EXPECT_EQ(lstat(e.path().c_str(), &st), 0);
    std::string v = std::to_string(st.st_mode) + " " + std::to_string(st.st_size) + " " +
                    std::to_string(st.st_mtim.tv_sec) + "." + std::to_string(st.st_mtim.tv_nsec);
    if (S_ISREG(st.st_mode)) {
      auto content = Env::Default()->ReadFile(e.path().string(), 1 << 20);
      v += " " + (content.ok() ? *content : std::string("?"));
    }
    out[e.path().string()] = v;
  }
  return out;
}

TEST_F(LifecycleVerbsTest, NoVerbTouchesAHostFolder) {
  std::string host = dir_ + "/project";
  fs::create_directories(host + "/src/deep");
  ASSERT_TRUE(Env::Default()->WriteFile(host + "/README", "keep me\n").ok());
  ASSERT_TRUE(Env::Default()->WriteFile(host + "/src/deep/main.c", "int main(){}\n").ok());
  chmod((host + "/src").c_str(), 0750);
  std::map<std::string, std::string> before = Snapshot(host);
  struct stat root_before;
  ASSERT_EQ(stat(host.c_str(), &root_before), 0);

  ASSERT_EQ(Run({"create", "ws", "--image", base_, "--home-size", "64M", "-v",
                 host + ":/mnt/project"}).code, 0);
  auto check = [&](const std::string& after_what) {
    EXPECT_EQ(Snapshot(host), before) << "after " << after_what;
    struct stat st;
    ASSERT_EQ(stat(host.c_str(), &st), 0) << after_what;
    EXPECT_EQ(st.st_mode, root_before.st_mode) << after_what;
    EXPECT_EQ(st.st_mtim.tv_sec, root_before.st_mtim.tv_sec) << after_what;
    EXPECT_EQ(st.st_mtim.tv_nsec, root_before.st_mtim.tv_nsec) << after_what;
  };
  check("create");
  for (std::vector<std::string> verb :
       {std::vector<std::string>{"checkpoint", "create", "ws"}, {"reset", "ws", "-f"},
        {"wipe-home", "ws", "-f"}, {"wipe", "ws", "-f"}, {"stop", "ws", "--force"},
        {"rm", "ws", "-f"}}) {
    Outcome o = Run(verb);
    EXPECT_EQ(o.code, 0) << verb[0] << ": " << o.err;
    check(verb[0]);
  }
  EXPECT_FALSE(fs::exists(store_ + "/workspaces/ws"));
}

// A supervisor stand-in for workspace `name`: holds its pid file's lock and answers `status` with
// state_for(n) (n = the how-many-th status request) and `open-stream` with a stream whose far end
// plays the guest: it reports exit code 7 at once, and reads until the client closes.
class FakeSupervisor {
 public:
  FakeSupervisor(const WorkspacePaths& p, std::function<std::string(int)> state_for,
                 std::string stage)
      : state_for_(std::move(state_for)), stage_(std::move(stage)) {
    fs::create_directories(p.run_dir);
    auto pid = vm::ClaimPidFile(p.supervisor_pid);
    EXPECT_TRUE(pid.ok());
    pid_fd_ = pid.ok() ? *pid : -1;
    auto l = vm::ListenUnix(p.supervisor_socket);
    EXPECT_TRUE(l.ok());
    listen_fd_ = l.ok() ? *l : -1;
    thread_ = std::thread([this] { Serve(); });
  }
  ~FakeSupervisor() {
    stop_ = true;
    thread_.join();
    for (std::thread& g : guests_) g.join();
    close(listen_fd_);
    close(pid_fd_);
  }
  int statuses() const { return statuses_; }
  int opens() const { return opens_; }

 private:
  void Serve() {
    while (!stop_) {
      pollfd p{listen_fd_, POLLIN, 0};
      if (poll(&p, 1, 50) <= 0) continue;
      int c = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0) continue;
      vm::LineConn conn(c);
      auto req = conn.Read(std::chrono::steady_clock::now() + std::chrono::seconds(5));
      if (!req.ok()) continue;
      std::string op = vm::JsonString(*req, "op");
      if (op == "status") {
        (void)conn.Send({{"ok", true}, {"state", state_for_(statuses_++)}, {"stage", stage_}});
      } else if (op == "open-stream") {
        ++opens_;
        int sv[2];
        ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
        std::string exit;
        channel::EncodeExecMessage(channel::ExecMsg::kExit,
                                   channel::EncodeExit(channel::ExecExit{false, 7}), exit);
        ASSERT_EQ(write(sv[1], exit.data(), exit.size()), static_cast<ssize_t>(exit.size()));
        (void)conn.Send({{"ok", true}}, sv[0]);
        close(sv[0]);
        // The guest end stays open until the client is done (it reads what the client sends).
        guests_.emplace_back([fd = sv[1]] {
          char buf[4096];
          while (read(fd, buf, sizeof buf) > 0) {
          }
          close(fd);
        });
      } else {
        (void)conn.Send(vm::ErrorReply(Error(ErrorCode::kInvalidArgument, "fake: " + op)));
      }
    }
  }

  std::function<std::string(int)> state_for_;
  std::string stage_;
  int pid_fd_ = -1, listen_fd_ = -1;
  std::atomic<bool> stop_{false};
  std::atomic<int> statuses_{0}, opens_{0};
  std::thread thread_;
  std::vector<std::thread> guests_;
};

// SECURITY: a paused (compromise-frozen) VM gets no new session; every refusal names the pause's
// reason and the fix, and ls says paused (not running).
TEST_F(LifecycleVerbsTest, PausedWorkspaceShowsPausedAndRefusesSessionsNamingWipe) {
  ASSERT_EQ(Run({"create", "ws", "--image", base_, "--home-size", "64M"}).code, 0);
  auto store = Store::Open(store_);
  ASSERT_TRUE(store.ok());
  const std::string why = "placeholder of github sent to evil.example (header)";
  FakeSupervisor fake((*store)->Paths("ws"), [](int) { return "paused"; }, why);

  Outcome ls = Run({"ls", "--json"});
  ASSERT_EQ(ls.code, 0) << ls.err;
  EXPECT_EQ(ls.json()[0]["state"], "paused") << ls.out;
  EXPECT_NE(ls.json()[0].value("hint", "").find("cloister wipe ws"), std::string::npos) << ls.out;
  Outcome human = Run({"ls"});
  EXPECT_NE(human.out.find("paused"), std::string::npos) << human.out;
  Outcome d = Run({"describe", "ws", "--json"});
  EXPECT_EQ(d.json()["state"], "paused") << d.out;
  EXPECT_EQ(d.json()["state_detail"], why) << d.out;

  for (std::vector<std::string> verb :
       {std::vector<std::string>{"exec", "ws", "--", "true"}, {"attach", "ws"},
        {"start", "ws", "--accel", "tcg"}, {"reboot", "ws"}, {"stop", "ws", "--suspend"}}) {
    Outcome o = Run(verb);
    EXPECT_NE(o.code, 0) << verb[0];
    EXPECT_NE(o.err.find("ws is paused: " + why), std::string::npos) << verb[0] << ": " << o.err;
    EXPECT_NE(o.err.find("cloister wipe ws"), std::string::npos) << verb[0] << ": " << o.err;
  }
  EXPECT_EQ(fake.opens(), 0) << "the CLI asked for a stream into a paused VM";
}

// `exec` after `start -d`: the workspace is booting; exec waits for READY and then runs.
TEST_F(LifecycleVerbsTest, ExecOnABootingWorkspaceWaitsForReady) {
  ASSERT_EQ(Run({"create", "ws", "--image", base_, "--home-size", "64M"}).code, 0);
  auto store = Store::Open(store_);
  ASSERT_TRUE(store.ok());
  FakeSupervisor fake((*store)->Paths("ws"),
                      [](int n) { return n < 3 ? "booting" : "running"; },
                      "booting; waiting for the guest agent");
  Outcome o = Run({"exec", "ws", "--", "true"});
  EXPECT_EQ(o.code, 7) << o.err;  // the fake guest's exit code: the command ran
  EXPECT_GE(fake.statuses(), 4);  // it asked until the answer was running
  EXPECT_EQ(fake.opens(), 1);
}

TEST_F(LifecycleVerbsTest, ExecWaitForReadyIsBoundedAndNamesTheBootLog) {
  ASSERT_EQ(Run({"create", "ws", "--image", base_, "--home-size", "64M"}).code, 0);
  auto store = Store::Open(store_);
  ASSERT_TRUE(store.ok());
  FakeSupervisor fake((*store)->Paths("ws"), [](int) { return "booting"; }, "starting QEMU");
  Outcome o = Run({"exec", "ws", "--wait", "1", "--", "true"});
  EXPECT_NE(o.code, 0);
  EXPECT_NE(o.err.find("ws is still booting: starting QEMU after 1 s"), std::string::npos) << o.err;
  EXPECT_NE(o.err.find("console.log"), std::string::npos) << o.err;
  EXPECT_NE(o.err.find("--wait"), std::string::npos) << o.err;
  EXPECT_EQ(fake.opens(), 0);
}

}  // namespace
}  // namespace cloister::cli
