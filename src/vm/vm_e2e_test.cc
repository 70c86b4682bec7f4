// End to end under TCG with the test image, driving the real `cloister` binary: boot to the agent's
// READY, exec (exit codes, stdin), attach on a pty, persistence across stop/start, reset,
// wipe-home, proven-boot checkpoints, a `-v` host folder (visible in the guest, never modified),
// the guest's lack of any network route, suspend and resume, `run NAME -- CMD`, `run --rm` (also
// after SIGTERM and a killed supervisor), and two workspaces at once. Label `vm`; each test is a
// few boots of 20-60 s under TCG.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <thread>

#include <nlohmann/json.hpp>

#include "base/strings.h"
#include "base/subprocess.h"
#include "image/testing.h"
#include "store/env.h"
#include "store/store.h"
#include "vm/launcher.h"
#include "vm/state.h"
#include "vm/testing.h"
#include "vm/workspace.h"

namespace cloister::vm {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// Every file's path, mode, size, mtime and content under `root` (the root itself included).
std::map<std::string, std::string> Snapshot(const std::string& root) {
  std::map<std::string, std::string> out;
  auto add = [&](const fs::path& p) {
    struct stat st;
    if (lstat(p.c_str(), &st) != 0) return;
    std::string v = std::to_string(st.st_mode) + " " + std::to_string(st.st_size) + " " +
                    std::to_string(st.st_mtim.tv_sec) + "." + std::to_string(st.st_mtim.tv_nsec);
    if (S_ISREG(st.st_mode)) {
      auto content = Env::Default()->ReadFile(p.string(), 1 << 20);
      v += " " + (content.ok() ? *content : std::string("?"));
    }
    out[p.string()] = v;
  };
  add(root);
  for (const auto& e : fs::recursive_directory_iterator(root)) add(e.path());
  return out;
}

using testing::WaitFor;

class VmE2eTest : public testing::CliVmTest {
 protected:
  // Home 1 GiB (the default spec's 256 MiB is for tests that scan raw disks).
  void Create(const std::string& name, const std::vector<Volume>& volumes = {}) {
    testing::WorkspaceSpec spec;
    spec.home_size = 1ull << 30;
    spec.volumes = volumes;
    CliVmTest::Create(name, spec);
  }
  size_t CheckpointCount(const std::string& name) {
    auto c = store_->ListCheckpoints(name);
    EXPECT_TRUE(c.ok());
    return c.ok() ? c->size() : 0;
  }
  std::string MacRegistry() { return testing::Slurp(root_ + "/macs.json"); }
};

TEST_F(VmE2eTest, LifecycleExecPersistenceResetWipeHomeCheckpoints) {
  // A host folder shared into the guest: readable there, never modified by any verb.
  std::string host = root_ + "/project";
  fs::create_directories(host + "/src");
  ASSERT_TRUE(Env::Default()->WriteFile(host + "/src/main.c", "int main(){return 0;}\n").ok());
  std::map<std::string, std::string> host_before = Snapshot(host);

  Create("ws", {Volume{host, "/mnt/project", false}});
  Start("ws");
  EXPECT_EQ(DeriveStatus(RunPathsFor(*store_, "ws")).state, VmState::kRunning);
  EXPECT_EQ(CheckpointCount("ws"), 1u);  // the proven-boot checkpoint

  int code = -1;
  EXPECT_EQ(Exec("ws", "echo hello", &code), "hello\n");
  EXPECT_EQ(code, 0);
  Exec("ws", "exit 42", &code);
  EXPECT_EQ(code, 42);
  EXPECT_EQ(Exec("ws", "id -u"), "1000\n");
  EXPECT_EQ(Exec("ws", "hostname"), "ws\n");
  // stdin streams to the guest with -i; stderr comes back separately.
  auto piped = Cloister({"exec", "-i", "ws", "--", "sh", "-c", "tr a-z A-Z; echo err >&2"},
                        "piped through the guest\n");
  EXPECT_EQ(piped.exit_code, 0);
  EXPECT_EQ(piped.out, "PIPED THROUGH THE GUEST\n");
  EXPECT_NE(piped.err.find("err"), std::string::npos);
  EXPECT_EQ(Exec("ws", "cat /mnt/project/src/main.c", &code, "root"), "int main(){return 0;}\n");

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
  ASSERT_EQ(code, 0);
  Stop("ws");
  auto cps = store_->ListCheckpoints("ws");
  ASSERT_TRUE(cps.ok());
  ASSERT_EQ(cps->size(), 2u);
  auto restore = Cloister({"checkpoint", "restore", "ws", cps->back().record.id, "-f"});
  ASSERT_EQ(restore.exit_code, 0) << restore.err;
  Start("ws");
  EXPECT_EQ(Exec("ws", "cat /home/dev/h.txt"), "home-data\n");
  Exec("ws", "test -e /home/dev/later.txt", &code);
  EXPECT_EQ(code, 1);
  Stop("ws");

  auto reset = Cloister({"reset", "ws", "-f"});
  ASSERT_EQ(reset.exit_code, 0) << reset.err;
  Start("ws");
  Exec("ws", "test -e /etc/e.txt", &code);
  EXPECT_EQ(code, 1);  // the system disk is back to the base image
  EXPECT_EQ(Exec("ws", "cat /home/dev/h.txt"), "home-data\n");
  Stop("ws");

  auto wipe_home = Cloister({"wipe-home", "ws", "-f"});
  ASSERT_EQ(wipe_home.exit_code, 0) << wipe_home.err;
  Start("ws");
  Exec("ws", "test -e /home/dev/h.txt", &code);
  EXPECT_EQ(code, 1);
  EXPECT_EQ(CheckpointCount("ws"), 1u);  // wipe-home dropped the old ones; this boot's is new
  Stop("ws");

  auto rm = Cloister({"rm", "ws", "-f"});
  ASSERT_EQ(rm.exit_code, 0) << rm.err;
  EXPECT_EQ(Snapshot(host), host_before);
}

// The proven-boot checkpoint needs the agent's READY: a guest whose boot hook runs but whose
// "agent" never proves a terminal gets no checkpoint, and the failure names the boot log.
TEST_F(VmE2eTest, NoCheckpointWithoutTheAgentsReadyAndTheBootLogIsNamed) {
  Create("nr");
  std::string fake = root_ + "/fake-agent";
  ASSERT_TRUE(Env::Default()
                  ->WriteFile(fake, "#!/bin/sh\necho fake-agent-started-no-ready\nsync\npoweroff -f\n")
                  .ok());
  chmod(fake.c_str(), 0755);
  RunOptions o;
  o.timeout = std::chrono::minutes(6);
  o.env_set["CLOISTER_AGENT_BIN"] = fake;
  auto r = RunProcess({exe_, "--store", root_, "start", "nr", "--accel", "tcg"}, o);
  ASSERT_TRUE(r.ok());
  EXPECT_NE(r->exit_code, 0);
  std::string console = store_->Paths("nr").console_log;
  EXPECT_NE(r->err.find(console), std::string::npos) << r->err;
  auto log = Env::Default()->ReadFile(console, 4 << 20);
  ASSERT_TRUE(log.ok());
  // The guest did boot to the hook and ran the "agent": only READY was missing.
  EXPECT_NE(log->find("fake-agent-started-no-ready"), std::string::npos);
  EXPECT_EQ(CheckpointCount("nr"), 0u);
  EXPECT_EQ(DeriveStatus(RunPathsFor(*store_, "nr")).state, VmState::kStopped);
}

TEST_F(VmE2eTest, GuestHasNoNetworkRouteButTheChannel) {
  // A server on the host's loopback. Unrestricted QEMU user networking would forward a guest
  // connection to 10.0.2.2:PORT to it; with restrict=on nothing may arrive.
  int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  ASSERT_GE(lfd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(lfd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(listen(lfd, 8), 0);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(getsockname(lfd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  std::string port = std::to_string(ntohs(addr.sin_port));

  Create("net");
  Start("net");
  int code = -1;
  // The NIC exists with the workspace's MAC, so a failure below is the restriction, not a
  // missing device.
  auto cfg = store_->LoadConfig("net");
  ASSERT_TRUE(cfg.ok());
  EXPECT_EQ(Exec("net", "cat /sys/class/net/eth0/address"), cfg->mac + "\n");
  std::string out = Exec("net",
                         "ip link set eth0 up && ip addr add 10.0.2.15/24 dev eth0 && "
                         "ip route add default via 10.0.2.2 && echo configured; "
                         "for t in 10.0.2.2:" + port + " 10.0.2.3:53 10.0.2.2:22; do "
                         "nc -w 4 ${t%:*} ${t#*:} </dev/null >/dev/null 2>&1 && echo OPEN $t; done; "
                         "echo done",
                         &code, "root");
  EXPECT_EQ(code, 0);
  EXPECT_NE(out.find("configured"), std::string::npos) << out;
  EXPECT_NE(out.find("done"), std::string::npos) << out;
  EXPECT_EQ(out.find("OPEN"), std::string::npos) << out;
  pollfd p{lfd, POLLIN, 0};
  EXPECT_EQ(poll(&p, 1, 0), 0) << "a guest connection reached the host's loopback";
  close(lfd);
  // The channel still works: exec is a host endpoint.
  EXPECT_EQ(Exec("net", "echo still-here"), "still-here\n");
  Stop("net");
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

TEST_F(VmE2eTest, RunRmLeavesNothingAfterExitSigtermOrAKilledSupervisor) {
  auto r = Cloister({"run", "--rm", "--accel", "tcg", "--image", image_dir() + "/disk.raw",
                     "--", "echo", "from-run"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("from-run"), std::string::npos);
  auto list = store_->List();
  ASSERT_TRUE(list.ok());
  EXPECT_TRUE(list->empty());
  EXPECT_EQ(MacRegistry().find("run-"), std::string::npos) << MacRegistry();

  // SIGTERM to `run` while its command runs: the workspace goes too.
  pid_t run = SpawnCloister({"run", "--rm", "--accel", "tcg", "--image",
                             image_dir() + "/disk.raw", "--", "sleep", "100000"});
  ASSERT_GT(run, 0);
  std::string name;
  ASSERT_TRUE(WaitFor([&] {
    auto l = store_->List();
    if (!l.ok() || l->empty()) return false;
    name = (*l)[0].name;
    auto fd = OpenExecStream(*store_, name);  // running and the agent answers
    if (!fd.ok()) return false;
    close(*fd);
    return true;
  }, std::chrono::minutes(5)));
  ASSERT_EQ(kill(run, SIGTERM), 0);
  int status = 0;
  ASSERT_TRUE(WaitFor([&] { return waitpid(run, &status, WNOHANG) == run; }, std::chrono::minutes(2)));
  EXPECT_FALSE(fs::exists(store_->Paths(name).dir));
  EXPECT_EQ(MacRegistry().find(name), std::string::npos) << MacRegistry();

  // Detached, then its supervisor is killed: QEMU dies with it, and the next verb collects it.
  r = Cloister({"run", "--rm", "-d", "--accel", "tcg", "--image", image_dir() + "/disk.raw"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  name = Trim(r.out);
  ASSERT_FALSE(name.empty());
  RunPaths paths = RunPathsFor(*store_, name);
  pid_t sup = LivePid(paths.supervisor_pid);
  ASSERT_GT(sup, 0);
  ASSERT_EQ(kill(sup, SIGKILL), 0);
  ASSERT_TRUE(WaitFor([&] { return LivePid(paths.supervisor_pid) == 0; }, std::chrono::seconds(20)));
  EXPECT_EQ(DeriveStatus(paths).state, VmState::kBroken);
  Cloister({"stop", name});  // any lifecycle verb collects a dead ephemeral workspace
  EXPECT_FALSE(fs::exists(paths.workspace_dir));
  EXPECT_EQ(MacRegistry().find(name), std::string::npos);
}

TEST_F(VmE2eTest, TwoWorkspacesRunAtOnceAttachAndRunName) {
  Create("a");
  Create("b");
  Start("a");
  // `run NAME -- CMD` starts a stopped workspace, runs CMD, and leaves it running.
  auto r = Cloister({"run", "b", "--accel", "tcg", "--", "hostname"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "b\n");
  EXPECT_EQ(DeriveStatus(RunPathsFor(*store_, "b")).state, VmState::kRunning);
  r = Cloister({"run", "b", "--", "sh", "-c", "exit 7"});
  EXPECT_EQ(r.exit_code, 7);

  int code = -1;
  Exec("a", "echo only-a > /home/dev/a.txt && sync", &code);
  ASSERT_EQ(code, 0);
  Exec("b", "test -e /home/dev/a.txt", &code);
  EXPECT_EQ(code, 1);
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

  // attach: a real terminal in a's tmux session; detaching leaves the VM running.
  int master = -1;
  winsize ws{30, 100, 0, 0};
  std::vector<std::string> args = {exe_, "--store", root_, "attach", "a"};
  pid_t child = forkpty(&master, nullptr, nullptr, &ws);
  ASSERT_GE(child, 0);
  if (child == 0) {
    std::vector<char*> argv;
    for (auto& s : args) argv.push_back(s.data());
    argv.push_back(nullptr);
    setenv("TERM", "xterm", 1);
    execv(exe_.c_str(), argv.data());
    _exit(127);
  }
  std::string screen;
  auto read_until = [&](const std::string& needle, std::chrono::seconds limit) {
    auto deadline = Clock::now() + limit;
    while (screen.find(needle) == std::string::npos) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      if (left.count() <= 0) return false;
      pollfd p{master, POLLIN, 0};
      if (poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
      char buf[4096];
      ssize_t n = read(master, buf, sizeof(buf));
      if (n <= 0) return false;
      screen.append(buf, static_cast<size_t>(n));
    }
    return true;
  };
  // The typed line is "echo $((6*7))X": only the shell's answer contains "42X".
  bool typed = false;
  for (int i = 0; i < 20 && !typed; ++i) {
    std::string line = "echo $((6*7))X\r";
    ASSERT_EQ(write(master, line.data(), line.size()), static_cast<ssize_t>(line.size()));
    typed = read_until("42X", std::chrono::seconds(10));
  }
  EXPECT_TRUE(typed) << screen;
  ASSERT_EQ(write(master, "\x02" "d", 2), 2);  // C-b d: detach
  int status = -1;
  EXPECT_TRUE(WaitFor([&] { return waitpid(child, &status, WNOHANG) == child; },
                      std::chrono::seconds(30)));
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status << screen;
  close(master);
  EXPECT_EQ(DeriveStatus(RunPathsFor(*store_, "a")).state, VmState::kRunning);
  EXPECT_NE(Exec("a", "tmux ls").find("cloister"), std::string::npos);

  Stop("a");
  Stop("b");
}

// `cloister audit residue` through the CLI: refused (exit 2, naming start) while stopped; on a
// fresh workspace, run in the guest as root, both disks probed and not a foreign byte.
TEST_F(VmE2eTest, AuditResidueNeedsARunningVmAndAFreshWorkspaceIsClean) {
  // Also: a share inside the guest home (the default place for `-v HOSTDIR`), mounted after the
  // home disk so it is not hidden by it.
  std::string host = root_ + "/proj";
  fs::create_directories(host);
  ASSERT_TRUE(Env::Default()->WriteFile(host + "/README", "from the host\n").ok());
  auto spec = ParseVolumeSpec(host);
  ASSERT_TRUE(spec.ok());
  ASSERT_EQ(spec->guest, "/home/dev/proj");
  Create("ws", {*spec});
  auto stopped = Cloister({"audit", "residue", "ws"});
  EXPECT_EQ(stopped.exit_code, 2);
  EXPECT_NE(stopped.err.find("cloister start ws"), std::string::npos) << stopped.err;
  Start("ws");
  int code = -1;
  EXPECT_EQ(Exec("ws", "cat /home/dev/proj/README; stat -c %U /home/dev", &code), "from the host\ndev\n");
  EXPECT_EQ(code, 0);
  auto r = Cloister({"audit", "residue", "ws", "--json", "--max-regions", "256"});
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  auto j = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << r.out;
  EXPECT_EQ(j["clean"], true);
  ASSERT_EQ(j["disks"].size(), 2u);
  for (const auto& d : j["disks"]) {
    EXPECT_GT(d["probed_regions"].get<uint64_t>(), 0u) << d.dump();
    EXPECT_EQ(d["bytes"]["foreign"].get<uint64_t>(), 0u) << d.dump();
    EXPECT_EQ(d["in_use_blocks_written"].get<uint64_t>(), 0u) << d.dump();
  }
  auto text = Cloister({"audit", "residue", "ws", "--max-regions", "64"});
  EXPECT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("verdict: clean"), std::string::npos) << text.out;
}

}  // namespace
}  // namespace cloister::vm
