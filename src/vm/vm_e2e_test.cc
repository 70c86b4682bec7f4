// End to end under TCG with the test image, driving the real `cloister` binary: boot to the agent's
// READY, exec, persistence across stop/start, reset, wipe-home, proven-boot checkpoints, suspend and
// resume, run --rm (also after a killed supervisor), the guest's lack of a network route, and two
// workspaces at once. Label `vm`; each test is a few boots of ~10-30 s.
#include <signal.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iostream>

#include "base/strings.h"
#include "base/subprocess.h"
#include "image/builder.h"
#include "image/testing.h"
#include "store/store.h"
#include "vm/launcher.h"
#include "vm/state.h"
#include "vm/workspace.h"

namespace cloister::vm {
namespace {

namespace fs = std::filesystem;

std::string* g_image_dir = nullptr;

class VmE2eTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    static image::testing::TempDir dir;
    image::BuildOptions o;
    o.cache_dir = image::testing::TestCacheDir();
    o.out_dir = dir.path() + "/img";
    auto entry = image::BuildTestImage(o);
    ASSERT_TRUE(entry.ok()) << entry.error().ToString();
    g_image_dir = new std::string(o.out_dir);
  }

  void SetUp() override {
    ASSERT_NE(g_image_dir, nullptr);
    char t[] = "/tmp/cl-e2e-XXXXXX";  // short: unix socket paths are limited to 107 bytes
    root_ = mkdtemp(t);
    auto s = Store::Open(root_);
    ASSERT_TRUE(s.ok());
    store_ = std::move(*s);
    const char* bin = std::getenv("CLOISTER_BINARY_DIR");
    ASSERT_NE(bin, nullptr);
    exe_ = std::string(bin) + "/src/cli/cloister";
  }

  void TearDown() override {
    // Never leave a VM behind, whatever failed.
    auto list = store_->List();
    if (list.ok()) {
      for (const auto& ws : *list) {
        StopOptions so;
        so.force = true;
        std::ostringstream quiet;
        (void)StopWorkspace(*store_, ws.name, so, quiet);
      }
    }
    fs::remove_all(root_);
  }

  RunOutput Cloister(std::vector<std::string> args) {
    args.insert(args.begin(), {exe_, "--store", root_});
    RunOptions o;
    o.timeout = std::chrono::minutes(5);
    auto r = RunProcess(args, o);
    EXPECT_TRUE(r.ok());
    if (!r.ok()) return RunOutput{};
    if (r->exit_code != 0) std::cerr << "[" << Join(args, " ") << "] -> " << r->exit_code << "\n" << r->err;
    return *r;
  }

  void Create(const std::string& name) {
    CreateRequest req;
    req.name = name;
    req.image = *g_image_dir + "/disk.raw";
    req.memory_mib = 512;
    req.cpus = 1;
    req.home_size = 1ull << 30;
    auto c = store_->Create(req);
    ASSERT_TRUE(c.ok()) << c.error().ToString();
  }

  void Start(const std::string& name) {
    auto r = Cloister({"start", name, "--accel", "tcg"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.err.find("ready"), std::string::npos) << r.err;
  }
  void Stop(const std::string& name) {
    auto r = Cloister({"stop", name, "--timeout", "60"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(DeriveStatus(RunPathsFor(*store_, name)).state, VmState::kStopped);
  }
  // Exec as `user`; returns stdout, sets *code.
  std::string Exec(const std::string& name, const std::string& script, int* code = nullptr,
                   const std::string& user = "dev") {
    auto r = Cloister({"exec", name, "-u", user, "--", "sh", "-c", script});
    if (code) *code = r.exit_code;
    return r.out;
  }
  size_t CheckpointCount(const std::string& name) {
    auto c = store_->ListCheckpoints(name);
    EXPECT_TRUE(c.ok());
    return c.ok() ? c->size() : 0;
  }

  std::string root_;
  std::string exe_;
  std::unique_ptr<Store> store_;
};

TEST_F(VmE2eTest, LifecycleExecPersistenceResetWipeHomeCheckpoints) {
  Create("ws");
  Start("ws");
  EXPECT_EQ(DeriveStatus(RunPathsFor(*store_, "ws")).state, VmState::kRunning);
  EXPECT_EQ(CheckpointCount("ws"), 1u);  // the proven-boot checkpoint

  int code = -1;
  EXPECT_EQ(Exec("ws", "echo hello", &code), "hello\n");
  EXPECT_EQ(code, 0);
  Exec("ws", "exit 42", &code);
  EXPECT_EQ(code, 42);
  EXPECT_EQ(Exec("ws", "id -u"), "1000\n");

  // The guest has no route out: a raw TCP connect to slirp's host alias fails (restrict=on).
  Exec("ws", "command -v nc", &code);
  ASSERT_EQ(code, 0) << "the test image needs nc for this check";
  Exec("ws", "ip link set eth0 up; ip addr add 10.0.2.15/24 dev eth0; "
             "nc -w 3 10.0.2.2 22 </dev/null && echo CONNECTED", &code, "root");
  std::string net = Exec("ws", "nc -w 3 10.0.2.2 22 </dev/null >/dev/null 2>&1; echo rc=$?", &code);
  EXPECT_NE(net.find("rc="), std::string::npos);
  EXPECT_EQ(net.find("rc=0"), std::string::npos) << net;

  Exec("ws", "echo home-data > /home/dev/h.txt && sync", &code);
  ASSERT_EQ(code, 0);
  Exec("ws", "echo etc-data > /etc/e.txt && sync", &code, "root");
  ASSERT_EQ(code, 0);
  Stop("ws");

  Start("ws");
  EXPECT_EQ(CheckpointCount("ws"), 2u);
  EXPECT_EQ(Exec("ws", "cat /home/dev/h.txt"), "home-data\n");
  EXPECT_EQ(Exec("ws", "cat /etc/e.txt"), "etc-data\n");
  // Written after this boot's checkpoint: a restore of that checkpoint drops it.
  Exec("ws", "echo later > /home/dev/later.txt && sync", &code);
  Stop("ws");
  auto cps = store_->ListCheckpoints("ws");
  ASSERT_TRUE(cps.ok());
  ASSERT_EQ(cps->size(), 2u);
  ASSERT_TRUE(store_->RestoreCheckpoint("ws", cps->back().record.id).ok());
  Start("ws");
  EXPECT_EQ(Exec("ws", "cat /home/dev/h.txt"), "home-data\n");
  Exec("ws", "test -e /home/dev/later.txt", &code);
  EXPECT_NE(code, 0);
  Stop("ws");

  ASSERT_TRUE(store_->Reset("ws").ok());
  Start("ws");
  Exec("ws", "test -e /etc/e.txt", &code);
  EXPECT_NE(code, 0);  // the system disk is back to the base image
  EXPECT_EQ(Exec("ws", "cat /home/dev/h.txt"), "home-data\n");
  Stop("ws");

  ASSERT_TRUE(store_->WipeHome("ws").ok());
  Start("ws");
  Exec("ws", "test -e /home/dev/h.txt", &code);
  EXPECT_NE(code, 0);
  EXPECT_GE(CheckpointCount("ws"), 1u);
  Stop("ws");
}

TEST_F(VmE2eTest, SuspendResumeKeepsAProcessAlive) {
  Create("ss");
  Start("ss");
  int code = -1;
  std::string pid = Trim(Exec("ss", "setsid sleep 100000 </dev/null >/dev/null 2>&1 & echo $!", &code));
  ASSERT_EQ(code, 0);
  ASSERT_FALSE(pid.empty());
  auto r = Cloister({"stop", "ss", "--suspend"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(DeriveStatus(RunPathsFor(*store_, "ss")).state, VmState::kSuspended);
  EXPECT_TRUE(fs::exists(store_->Paths("ss").suspend_state));
  r = Cloister({"start", "ss"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("resum"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(store_->Paths("ss").suspend_state));
  Exec("ss", "kill -0 " + pid, &code);
  EXPECT_EQ(code, 0) << "process " << pid << " did not survive suspend/resume";
  Stop("ss");
}

TEST_F(VmE2eTest, RunRmLeavesNothingAlsoAfterAKilledSupervisor) {
  auto mac_registry = [&] {
    std::ifstream f(root_ + "/macs.json");
    return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  };
  auto r = Cloister({"run", "--rm", "--accel", "tcg", "--image", *g_image_dir + "/disk.raw",
                     "--", "echo", "from-run"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("from-run"), std::string::npos);
  auto list = store_->List();
  ASSERT_TRUE(list.ok());
  EXPECT_TRUE(list->empty());
  EXPECT_EQ(mac_registry().find("run-"), std::string::npos) << mac_registry();

  // Detached, then its supervisor is killed: QEMU dies with it, and the next verb collects it.
  r = Cloister({"run", "--rm", "-d", "--accel", "tcg", "--image", *g_image_dir + "/disk.raw"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::string name = Trim(r.out);
  ASSERT_FALSE(name.empty());
  RunPaths paths = RunPathsFor(*store_, name);
  pid_t sup = LivePid(paths.supervisor_pid);
  ASSERT_GT(sup, 0);
  ASSERT_EQ(kill(sup, SIGKILL), 0);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (LivePid(paths.supervisor_pid) != 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // bounded wait for the kill
  }
  EXPECT_EQ(DeriveStatus(paths).state, VmState::kBroken);
  Cloister({"stop", name});
  EXPECT_FALSE(fs::exists(paths.workspace_dir));
  EXPECT_EQ(mac_registry().find(name), std::string::npos);
}

TEST_F(VmE2eTest, TwoWorkspacesRunAtOnceSharingOnlyTheBaseImage) {
  Create("a");
  Create("b");
  Start("a");
  Start("b");
  int code = -1;
  Exec("a", "echo only-a > /home/dev/a.txt && sync", &code);
  ASSERT_EQ(code, 0);
  Exec("b", "test -e /home/dev/a.txt", &code);
  EXPECT_NE(code, 0);
  EXPECT_EQ(Exec("a", "cat /home/dev/a.txt"), "only-a\n");
  auto ca = store_->LoadConfig("a");
  auto cb = store_->LoadConfig("b");
  ASSERT_TRUE(ca.ok() && cb.ok());
  EXPECT_NE(ca->mac, cb->mac);
  EXPECT_EQ(ca->image.path, cb->image.path);  // the one shared object
  LiveDisks da = store_->LiveDiskPaths("a", *ca);
  LiveDisks db = store_->LiveDiskPaths("b", *cb);
  EXPECT_NE(da.system.path, db.system.path);
  EXPECT_NE(da.home.path, db.home.path);
  Stop("a");
  Stop("b");
}

}  // namespace
}  // namespace cloister::vm
