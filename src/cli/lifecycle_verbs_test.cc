// The lifecycle verbs' refusals and derived state, driven in-process through RunCli against a temp
// store, without booting anything: a compromised workspace does not start (the error names
// `cloister wipe NAME`), a stale pid file (even one naming a live, unrelated process) shows as
// broken with a hint and is cleaned by `stop`, and no verb touches a `-v` host folder.
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <sstream>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "base/file_util.h"
#include "cli/cli.h"
#include "store/env.h"
#include "store/store.h"

namespace cloister::cli {
namespace {

namespace fs = std::filesystem;

struct Outcome {
  int code;
  std::string out, err;
  nlohmann::json json() const { return nlohmann::json::parse(out, nullptr, false); }
};

class LifecycleVerbsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/cl-life.XXXXXX";
    dir_ = mkdtemp(tmpl);
    base_ = dir_ + "/base.raw";
    ASSERT_TRUE(Env::Default()->Truncate(base_, 64 << 20).ok());
    store_ = dir_ + "/store";
  }
  void TearDown() override { (void)Env::Default()->RemoveAll(dir_); }

  Outcome Run(std::vector<std::string> args) {
    std::vector<std::string> full = {"cloister", "--store", store_};
    full.insert(full.end(), args.begin(), args.end());
    std::vector<const char*> argv;
    for (const auto& a : full) argv.push_back(a.c_str());
    std::ostringstream out, err;
    std::istringstream in;
    int code = RunCli(static_cast<int>(argv.size()), argv.data(), out, err, in);
    return {code, out.str(), err.str()};
  }

  std::string dir_, base_, store_;
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

}  // namespace
}  // namespace cloister::cli
