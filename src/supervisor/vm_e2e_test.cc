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
#include <grp.h>
#include <pwd.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "base/strings.h"
#include "base/subprocess.h"
#include "image/testing.h"
#include "store/env.h"
#include "store/store.h"
#include "supervisor/launcher.h"
#include "vm/process.h"
#include "vm/qemu_access.h"
#include "supervisor/state.h"
#include "supervisor/testing.h"
#include "supervisor/workspace.h"

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

// Issue 38, host git's own configuration: the shared repository as a husky project and a team
// leave it, before the boot: core.hooksPath=.husky holding a pre-commit hook, include.path naming
// a team file in the working tree and a local one not made yet, core.fsmonitor a script in the
// working tree. A shell command the repository's owner runs in it.
constexpr const char* kHostGitConfigSetup =
    "mkdir -p .husky tools && printf '#!/bin/sh\\nexit 0\\n' > .husky/pre-commit && "
    "printf '#!/bin/sh\\nexit 1\\n' > tools/fsmonitor.sh && chmod 755 .husky/pre-commit tools/fsmonitor.sh && "
    "printf '[user]\\n\\tname = team\\n' > team.gitconfig && git config core.hooksPath .husky && "
    "git config include.path ../team.gitconfig && git config --add include.path ../local.gitconfig && "
    "git config core.fsmonitor tools/fsmonitor.sh";

// Issue 38: what the guest's own user does in a shared repository (create, edit, commit, with no
// safe.directory and not as the guest's root), then every way it might plant a repository that
// host git would use: `git init` below the share, a `.git` made by mkdir, rename, symlink or a
// `.git` file pointing to a guest-made git dir, a bare-repository shape, and a setuid file; then
// what kHostGitConfigSetup's configuration runs: the husky hook changed, a new hook, the hook
// directory swapped, the included file written and the missing one made, the fsmonitor script
// written and replaced; and files beside them. One "NAME ok|denied" line each, then
// SHARED-REPO-DONE. `canary` is a host path: host git touching it means it ran the guest's code.
std::string SharedRepoGuestScript(const std::string& dir, const std::string& canary) {
  return "cd " + dir + " || exit 90\n"
         "try() { n=$1; shift; if \"$@\" >/dev/null 2>&1; then echo \"$n ok\"; else echo \"$n denied\"; fi; }\n"
         "g() { git -c user.name=g -c user.email=g@g \"$@\"; }\n"
         "printf '[core]\\n\\tfsmonitor = \"touch " + canary + "; false\"\\n\\tpager = \"touch " + canary + "; cat\"\\n' > /tmp/evil.cfg\n"
         "printf '#!/bin/sh\\ntouch " + canary + "\\nexit 1\\n' > /tmp/evil.sh && chmod 755 /tmp/evil.sh\n"
         "echo \"uid $(id -u)\"\n"
         "try create sh -c 'echo one > guest-file.txt'\n"
         "try edit sh -c 'echo two >> guest-file.txt && echo edited >> README'\n"
         "try mkdir-tree sh -c 'mkdir -p guest-dir/deep && echo x > guest-dir/deep/f'\n"
         "try commit sh -c 'git add -A && git -c user.name=g -c user.email=g@g commit -q -m guest-commit'\n"
         "try branch g branch shared-branch\n"
         "try nested-init git init -q nested\n"
         "try nested-config sh -c 'cat /tmp/evil.cfg >> nested/.git/config'\n"
         "try nested-mkdir mkdir -p nested2/.git\n"
         "try nested-mkdir-case mkdir -p nested3/.Git\n"
         "try bare-shape sh -c \"mkdir -p evil/objects evil/refs && echo 'ref: refs/heads/main' > evil/HEAD\"\n"
         "try bare-config sh -c 'cat /tmp/evil.cfg > evil/config'\n"
         "try gitfile sh -c \"mkdir -p gf && echo 'gitdir: ../evil' > gf/.git\"\n"
         "try rename-to-git sh -c 'mkdir -p rn/x && mv rn/x rn/.git'\n"
         "try symlink-git sh -c 'mkdir -p sl && ln -s ../evil sl/.git'\n"
         "try hardlink-git sh -c 'echo \"gitdir: ../evil\" > hl-src && mkdir -p hl && ln hl-src hl/.git'\n"
         "try setuid sh -c 'cp /bin/true suid-file && chmod u+s suid-file'\n"
         "try husky-modify sh -c 'cat /tmp/evil.sh > .husky/pre-commit'\n"
         "try husky-create cp /tmp/evil.sh .husky/post-checkout\n"
         "try husky-swap sh -c 'mv .husky .husky-old && mkdir .husky && cp /tmp/evil.sh .husky/pre-commit'\n"
         "try include-write sh -c 'cat /tmp/evil.cfg >> team.gitconfig'\n"
         "try include-create cp /tmp/evil.cfg local.gitconfig\n"
         "try fsmonitor-write sh -c 'cat /tmp/evil.sh > tools/fsmonitor.sh'\n"
         "try fsmonitor-replace sh -c 'cp /tmp/evil.sh tools/x.sh && mv -f tools/x.sh tools/fsmonitor.sh'\n"
         "try beside-config sh -c 'echo x > tools/notes && echo y > team.gitconfig.orig'\n"
         "echo SHARED-REPO-DONE\n";
}

// The guest script's lines "NAME ok|denied" as a map.
std::map<std::string, std::string> TryResults(const std::string& out) {
  std::map<std::string, std::string> r;
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) {
    auto sp = line.rfind(' ');
    if (sp != std::string::npos) r[line.substr(0, sp)] = line.substr(sp + 1);
  }
  return r;
}

// Issue 38's proof on the host, after SharedRepoGuestScript ran in `repo` (a share of a
// repository the host made, with README committed): the guest's own user could work there; what
// it made belongs to `owner`; host git run as that owner (`as_owner` prefixes an argv) works
// without "dubious ownership" or safe.directory; every directory below the share resolves to the
// share's own git dir and `git status`, `diff` and `log` there run nothing of the guest's.
void ExpectSharedRepoSafe(const std::string& repo, uid_t owner, const std::string& canary,
                          const std::string& guest_out,
                          const std::function<std::vector<std::string>(std::vector<std::string>)>& as_owner) {
  auto r = TryResults(guest_out);
  EXPECT_NE(guest_out.find("uid 1000\n"), std::string::npos) << guest_out;
  for (const char* op : {"create", "edit", "mkdir-tree", "commit", "branch"}) {
    EXPECT_EQ(r[op], "ok") << op << "\n" << guest_out;
  }
  for (const char* op : {"nested-init", "nested-config", "nested-mkdir", "nested-mkdir-case",
                         "bare-shape", "gitfile", "rename-to-git", "symlink-git",
                         "hardlink-git", "setuid", "husky-modify", "husky-create", "husky-swap",
                         "include-write", "include-create", "fsmonitor-write", "fsmonitor-replace"}) {
    EXPECT_EQ(r[op], "denied") << op << "\n" << guest_out;
  }
  // What host git's configuration runs or reads is as the owner left it; beside it, the guest writes.
  EXPECT_EQ(r["beside-config"], "ok") << guest_out;
  auto read = [&](const char* rel) {
    auto text = Env::Default()->ReadFile(repo + "/" + rel, 1 << 20);
    return text.ok() ? *text : text.error().ToString();
  };
  EXPECT_EQ(read(".husky/pre-commit"), "#!/bin/sh\nexit 0\n");
  EXPECT_EQ(read("tools/fsmonitor.sh"), "#!/bin/sh\nexit 1\n");
  EXPECT_EQ(read("team.gitconfig"), "[user]\n\tname = team\n");
  EXPECT_EQ(read("tools/notes"), "x\n");
  for (const char* made : {"guest-file.txt", "guest-dir", "guest-dir/deep/f", "README"}) {
    struct stat st;
    ASSERT_EQ(lstat((repo + "/" + made).c_str(), &st), 0) << made;
    EXPECT_EQ(st.st_uid, owner) << made;
  }
  for (const char* planted : {"nested/.git", "nested2/.git", "nested3/.Git", "evil/HEAD", "gf/.git",
                              "rn/.git", "sl/.git", "hl/.git", ".husky/post-checkout", ".husky-old",
                              "local.gitconfig"}) {
    EXPECT_FALSE(fs::exists(fs::symlink_status(repo + "/" + planted))) << planted;
  }
  auto host_git = [&](const std::string& dir, const std::string& args) {
    auto g = RunProcess(as_owner({"sh", "-c", "cd '" + dir + "' && GIT_CONFIG_NOSYSTEM=1 "
                                  "GIT_CONFIG_GLOBAL=/dev/null git " + args + " 2>&1"}));
    return g.ok() ? g->out : g.error().ToString();
  };
  std::string status = host_git(repo, "status --porcelain");
  EXPECT_EQ(status.find("fatal"), std::string::npos) << status;
  EXPECT_EQ(status.find("dubious"), std::string::npos) << status;
  EXPECT_NE(host_git(repo, "log --oneline -1 main").find("guest-commit"), std::string::npos);
  EXPECT_NE(host_git(repo, "branch").find("shared-branch"), std::string::npos);
  // The hooks a host commit and checkout run (status and diff below run the fsmonitor script and
  // read the includes).
  EXPECT_EQ(host_git(repo, "hook run pre-commit"), "");
  EXPECT_EQ(host_git(repo, "hook run --ignore-missing post-checkout"), "");
  std::string gitdir = host_git(repo, "rev-parse --absolute-git-dir");
  for (const auto& e : fs::recursive_directory_iterator(repo)) {
    if (e.is_symlink() || !e.is_directory()) continue;
    std::string rel = e.path().lexically_relative(repo).string();
    if (rel == ".git" || rel.rfind(".git/", 0) == 0) continue;
    std::string d = e.path().string();
    EXPECT_EQ(host_git(d, "rev-parse --absolute-git-dir"), gitdir) << d;
    host_git(d, "status");
    host_git(d, "diff");
    host_git(d, "log -1");
  }
  EXPECT_FALSE(fs::exists(canary)) << "host git ran the guest's code";
}

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

  // Starts `cloister ARGS` with stdout on a pipe (stdin and stderr /dev/null); returns its pid and
  // sets *out_fd to the read end.
  pid_t SpawnCloisterPiped(std::vector<std::string> args, int* out_fd) {
    args.insert(args.begin(), {exe_, "--store", root_});
    int p[2];
    if (pipe2(p, O_CLOEXEC) != 0) return -1;
    pid_t pid = fork();
    if (pid == 0) {
      int null_fd = open("/dev/null", O_RDWR);
      dup2(null_fd, 0);
      dup2(p[1], 1);
      dup2(null_fd, 2);
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(exe_.c_str(), argv.data());
      _exit(127);
    }
    close(p[1]);
    *out_fd = p[0];
    return pid;
  }
  // Reads from fd into *buf until it contains `needle` (bounded); false on EOF or timeout.
  static bool ReadUntil(int fd, std::string* buf, const std::string& needle,
                        std::chrono::seconds limit) {
    auto deadline = Clock::now() + limit;
    while (buf->find(needle) == std::string::npos) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      if (left.count() <= 0) return false;
      pollfd p{fd, POLLIN, 0};
      if (poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
      char b[4096];
      ssize_t n = read(fd, b, sizeof(b));
      if (n <= 0) return false;
      buf->append(b, static_cast<size_t>(n));
    }
    return true;
  }
  // Waits (bounded) for our child `pid`; returns its wait status or -1.
  static int WaitExit(pid_t pid, std::chrono::seconds limit) {
    int status = -1;
    if (!WaitFor([&] { return waitpid(pid, &status, WNOHANG) == pid; }, limit)) return -1;
    return status;
  }
  // The running QEMU's pid, from its supervisor's status.
  pid_t QemuPid(const std::string& name) {
    VmStatus st = DeriveStatus(RunPathsFor(*store_, name));
    auto it = st.info.find("qemu_pid");
    return it != st.info.end() && it->is_number_integer() ? it->get<pid_t>() : -1;
  }
  // "Name:\tvalue" lines of /proc/PID/status.
  static std::map<std::string, std::string> ProcStatus(pid_t pid) {
    std::map<std::string, std::string> out;
    std::ifstream f("/proc/" + std::to_string(pid) + "/status");
    std::string line;
    while (std::getline(f, line)) {
      size_t colon = line.find(':');
      if (colon != std::string::npos) out[line.substr(0, colon)] = Trim(line.substr(colon + 1));
    }
    return out;
  }
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
  // Root undoes the guest agent's transparent egress (its nft redirect and its default route
  // into lo) and routes out through the NIC: QEMU's restrict=on must still drop everything.
  std::string out = Exec("net",
                         "nft flush ruleset && ip link set eth0 up && "
                         "ip addr add 10.0.2.15/24 dev eth0 && "
                         "ip route replace default via 10.0.2.2 dev eth0 && echo configured; "
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

// `start --timings` prints "PHASE MS" rows (names from supervisor/boot_timings.h), then the
// total; every value a number, none above the total. Returns the rows by name.
std::map<std::string, long long> ParseTimingsTable(const std::string& out) {
  std::map<std::string, long long> rows;
  std::istringstream in(out);
  std::string line;
  EXPECT_TRUE(std::getline(in, line));
  EXPECT_EQ(Trim(line).substr(0, 5), "PHASE") << out;
  while (std::getline(in, line)) {
    std::istringstream l(line);
    std::string name, ms, extra;
    EXPECT_TRUE(l >> name >> ms) << line;
    EXPECT_FALSE(l >> extra) << line;
    EXPECT_FALSE(ms.empty());
    EXPECT_EQ(ms.find_first_not_of("0123456789"), std::string::npos) << line;
    EXPECT_EQ(rows.count(name), 0u) << name << " twice in\n" << out;
    rows[name] = std::atoll(ms.c_str());
  }
  EXPECT_EQ(rows.count("total"), 1u) << out;
  for (const auto& [name, ms] : rows) EXPECT_LE(ms, rows["total"]) << name << "\n" << out;
  return rows;
}

// Also: `start --timings` on a fresh boot and on the resume, and the balloon with free page
// reporting read back over QMP (the supervisor's log line).
TEST_F(VmE2eTest, SuspendResumeKeepsAProcessAlive) {
  Create("ss");
  auto started = Cloister({"start", "ss", "--accel", "tcg", "--timings"});
  ASSERT_EQ(started.exit_code, 0) << started.err;
  auto boot = ParseTimingsTable(started.out);
  for (const char* phase : {"disks", "kernel-file", "proxy", "metadata-disk", "qemu-spawn", "qemu-start",
                            "firmware", "kernel", "init-to-hook", "agent-setup",
                            "terminal-probe", "to-ready", "checkpoint"}) {
    EXPECT_EQ(boot.count(phase), 1u) << phase << " missing from\n" << started.out;
  }
  std::cerr << "[start --timings]\n" << started.out;
  std::string log = testing::Slurp(RunPathsFor(*store_, "ss").supervisor_log);
  EXPECT_NE(log.find("balloon: free page reporting on"), std::string::npos) << log;
  // The test image's Debian kernel is entered through PVH (vm/pvh_kernel.h), from the cache.
  EXPECT_NE(log.find("kernel entry: pvh"), std::string::npos) << log;
  // SECURITY: no mapping of QEMU (guest RAM above all) is KSM-mergeable ("mg" in VmFlags):
  // pages are never merged across workspaces, even on a host that turns KSM on.
  {
    int qemu = DeriveStatus(RunPathsFor(*store_, "ss")).info.value("qemu_pid", -1);
    ASSERT_GT(qemu, 0);
    std::string smaps = testing::Slurp("/proc/" + std::to_string(qemu) + "/smaps");
    ASSERT_NE(smaps.find("VmFlags:"), std::string::npos);
    std::istringstream lines(smaps);
    int mergeable = 0;
    for (std::string l; std::getline(lines, l);) {
      if (StartsWith(l, "VmFlags:") && (l + " ").find(" mg ") != std::string::npos) ++mergeable;
    }
    EXPECT_EQ(mergeable, 0) << "QEMU marked guest memory MADV_MERGEABLE";
  }
  int code = -1;
  // The guest's balloon driver negotiated free page reporting (virtio device 5, feature bit 5,
  // VIRTIO_BALLOON_F_REPORTING): freed guest pages go back to the host.
  std::string features = Trim(Exec("ss",
                                   "for d in /sys/bus/virtio/devices/*; do "
                                   "if [ \"$(cat $d/device)\" = 0x0005 ]; then cat $d/features; fi; done",
                                   &code, "root"));
  EXPECT_EQ(code, 0);
  ASSERT_GT(features.size(), 5u) << "no virtio balloon in the guest";
  EXPECT_EQ(features[5], '1') << "free page reporting not negotiated: " << features;
  std::string pid = Trim(Exec("ss", "setsid sleep 100000 </dev/null >/dev/null 2>&1 & echo $!", &code));
  ASSERT_EQ(code, 0);
  ASSERT_FALSE(pid.empty());
  auto r = Cloister({"stop", "ss", "--suspend"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(DeriveStatus(RunPathsFor(*store_, "ss")).state, VmState::kSuspended);
  EXPECT_TRUE(fs::exists(store_->Paths("ss").suspend_state));
  // How the suspended boot entered its kernel, for the resume to do the same.
  const std::string kernel_note = store_->Paths("ss").dir + "/suspend.kernel";
  EXPECT_EQ(Trim(testing::Slurp(kernel_note)), "pvh");
  r = Cloister({"start", "ss", "--timings"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("resum"), std::string::npos) << r.err;
  auto resumed = ParseTimingsTable(r.out);
  EXPECT_EQ(resumed.count("resume"), 1u) << r.out;
  EXPECT_EQ(resumed.count("kernel"), 0u) << r.out;  // no guest boot on a resume
  std::cerr << "[resume --timings]\n" << r.out;
  EXPECT_FALSE(fs::exists(store_->Paths("ss").suspend_state));
  EXPECT_FALSE(fs::exists(kernel_note));
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
  Stop("b");

  // Issue 42, work back as git: a host repository goes in as a bundle (no share); the guest's
  // repository gets a planted fsmonitor and hooks naming a host path, then a commit.
  std::string repo = root_ + "/proj", marker = root_ + "/host-ran";
  auto host_git = [&](const std::string& args) {
    auto g = RunProcess({"sh", "-c", "cd '" + repo + "' && git -c user.name=t -c "
                         "user.email=t@example.test " + args + " 2>&1"});
    return g.ok() ? g->out : g.error().ToString();
  };
  fs::create_directories(repo);
  host_git("init -q -b main . && echo one > f.txt && git add f.txt && git -c user.name=t "
           "-c user.email=t@example.test commit -q -m one");
  r = Cloister({"git", "push", "a", "--host-repo", repo});
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  // (The marker's folder does not exist in the guest: there the hooks run and fail quietly.)
  std::string planted = Exec(
      "a", "cd /home/dev/proj && git config core.fsmonitor 'touch " + marker + "' && "
           "for h in pre-commit post-commit reference-transaction; do printf '#!/bin/sh\\ntouch " +
           marker + " 2>/dev/null; exit 0\\n' > .git/hooks/$h; chmod +x .git/hooks/$h; done && "
           "echo two >> f.txt && git -c user.name=g -c user.email=g@example.test commit -qam "
           "guest-two 2>&1 && sync", &code);
  ASSERT_EQ(code, 0) << planted;

  // Issue 42: fork the RUNNING a (a live, crash-consistent checkpoint over QMP; a runs on), then
  // a and the fork diverge, `rm -f a` (docker's: stops the VM, then deletes) leaves the fork
  // booting, and nothing of a's identity is the fork's.
  r = Cloister({"fork", "a", "fa", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json forks = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_TRUE(forks.is_array() && forks.size() == 1u) << r.out;
  EXPECT_EQ(forks[0].value("forked_from", ""), "a");
  EXPECT_EQ(DeriveStatus(RunPathsFor(*store_, "a")).state, VmState::kRunning);
  Exec("a", "echo after-fork > /home/dev/after.txt && sync", &code);
  ASSERT_EQ(code, 0);
  auto cf = store_->LoadConfig("fa");
  ca = store_->LoadConfig("a");
  ASSERT_TRUE(cf.ok() && ca.ok());
  EXPECT_NE(cf->mac, ca->mac);
  EXPECT_NE(cf->id, ca->id);
  std::string adir = store_->Paths("a").dir, fdir = store_->Paths("fa").dir;
  for (const char* f : {"/ssh/sshd_host_ed25519_key.pub", "/ssh/id_ed25519.pub", "/secrets.enc"}) {
    EXPECT_NE(testing::Slurp(fdir + f), testing::Slurp(adir + f)) << f;
  }
  EXPECT_NE(Cloister({"rm", "a", "--yes"}).exit_code, 0);  // plain rm refuses a running VM...
  r = Cloister({"rm", "-f", "a"});                          // ...rm -f stops it and deletes
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_FALSE(fs::exists(adir));
  Start("fa");
  EXPECT_EQ(Exec("fa", "cat /home/dev/a.txt"), "only-a\n");
  Exec("fa", "test -e /home/dev/after.txt", &code);
  EXPECT_EQ(code, 1);
  EXPECT_EQ(Exec("fa", "hostname"), "fa\n");
  // The fork's commit comes back as cloister/fa/main; diff shows it against the push; nothing the
  // guest planted ran on the host.
  r = Cloister({"diff", "fa"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("+two"), std::string::npos) << r.out;
  r = Cloister({"git", "pull", "fa", "--host-repo", repo, "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(host_git("log --format=%s -1 cloister/fa/main"), "guest-two\n");
  EXPECT_EQ(host_git("branch --list 'cloister/*'"), "  cloister/fa/main\n");
  // Guest root replaces git with one whose bundle carries a ref beyond the one asked: refused.
  Exec("fa", "git -C /home/dev/proj branch evil", &code);
  ASSERT_EQ(code, 0);
  Exec("fa", "printf '#!/bin/sh\\nexec /usr/bin/git -C /home/dev/proj bundle create - "
             "refs/heads/main refs/heads/evil\\n' > /usr/local/bin/git && chmod +x "
             "/usr/local/bin/git", &code, "root");
  ASSERT_EQ(code, 0);
  r = Cloister({"git", "pull", "fa", "--host-repo", repo});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("refs/heads/evil"), std::string::npos) << r.err;
  EXPECT_EQ(host_git("branch --list 'cloister/*' '*evil*'"), "  cloister/fa/main\n");
  EXPECT_FALSE(fs::exists(marker)) << "host git ran what the guest planted";
  Stop("fa");
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

// One workspace, two boots: `start -d` returns while the guest is still booting; QEMU runs under
// the workspace's own unprivileged uid with its seccomp filter (as root, as CI runs); in a share
// the guest's user acts as the folder's owner (root's folders here, and a repository of a third
// uid's) and no further; `exec -it`
// gets a pty with the caller's window size and a resize reaches the guest; SIGINT and SIGTERM to
// `cloister exec` reach the guest command and its exit code says so; `reboot` ends guest
// processes, keeps home, takes a new proven-boot checkpoint, and the agent answers again (still
// unprivileged).
TEST_F(VmE2eTest, StartDetachedHardenedQemuExecTtySignalsAndReboot) {
  std::string rw = root_ + "/rw";  // the test root itself is 0700: QEMU reaches rw/ by its fd only
  fs::create_directories(rw);
  // A folder of root's holding another user's private file and directory.
  std::string other = root_ + "/other";
  fs::create_directories(other + "/closed");
  ASSERT_TRUE(Env::Default()->WriteFile(other + "/private", "secret\n").ok());
  chmod((other + "/private").c_str(), 0600);
  ASSERT_EQ(chown((other + "/private").c_str(), 4242, 4242), 0);
  ASSERT_EQ(chown((other + "/closed").c_str(), 4242, 4242), 0);
  // A repository the guest shares (issue 15 item 2, issue 38): made by host git as root, left as
  // git made it (root's, 0755): the guest's own user works in it as its owner.
  std::string repo = root_ + "/repo";
  std::string canary = root_ + "/canary";
  auto host_git = [&](const std::string& args) {
    auto g = RunProcess({"sh", "-c", "cd " + repo + " && GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null "
                         "git -c user.name=h -c user.email=h@h " + args + " 2>&1"});
    return g.ok() ? g->out : g.error().ToString();
  };
  fs::create_directories(repo);
  ASSERT_TRUE(Env::Default()->WriteFile(repo + "/README", "host\n").ok());
  ASSERT_EQ(host_git("init -q -b main . && git add README && git commit -q -m host"), "");
  auto configured = RunProcess({"sh", "-c", "cd " + repo + " && " + kHostGitConfigSetup});
  ASSERT_TRUE(configured.ok() && configured->exit_code == 0);
  // A repository of a third owner's (uid 4242: neither the caller nor the guest's 1000), beside
  // the test root (which is closed to 4242) so that its owner's git can reach it afterwards.
  struct RemoveAll {
    std::string dir;
    ~RemoveAll() { std::error_code ec; fs::remove_all(dir, ec); }
  } third_root{root_ + "-third"};
  std::string third = third_root.dir + "/repo";
  fs::create_directories(third);
  auto third_made = RunProcess({"sh", "-c", "cd " + third + " && GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null "
                                "git init -q -b main . && echo third > README && git add README && "
                                "git -c user.name=h -c user.email=h@h commit -q -m host && chown -R 4242:4242 ."});
  ASSERT_TRUE(third_made.ok() && third_made->exit_code == 0);
  Create("hq", {Volume{rw, "/mnt/rw", false}, Volume{other, "/mnt/other", false},
                Volume{repo, "/mnt/repo", false}, Volume{third, "/mnt/third", false}});

  // Issue 15 item 3: a key the user exported in the shell that runs cloister reaches neither the
  // supervisor nor QEMU (supervisor/environment.h).
  const std::string exported_key =
      "sk-ant-api03-Zq7vE2eXportedK3yNotRealButShapedLikeOne0123456789abcdefghijklmnop"
      "qrstuvwxyz-ABCDEFGHIJAA";
  env_["ANTHROPIC_API_KEY"] = exported_key;

  // start -d: back as soon as QEMU runs; the agent is not ready yet under TCG.
  auto r = Cloister({"start", "hq", "-d", "--accel", "tcg"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "hq\n");
  EXPECT_EQ(DeriveStatus(RunPathsFor(*store_, "hq")).state, VmState::kBooting) << r.err;
  EXPECT_EQ(r.err.find("proven-boot"), std::string::npos) << r.err;
  EXPECT_EQ(CheckpointCount("hq"), 0u);
  ASSERT_TRUE(WaitFor([&] { return DeriveStatus(RunPathsFor(*store_, "hq")).state == VmState::kRunning; },
                      std::chrono::minutes(5)));
  EXPECT_EQ(CheckpointCount("hq"), 1u);

  auto cfg = store_->LoadConfig("hq");
  ASSERT_TRUE(cfg.ok());
  auto expect_hardened = [&] {
    pid_t qemu = QemuPid("hq");
    ASSERT_GT(qemu, 0);
    auto st = ProcStatus(qemu);
    if (geteuid() == 0) {
      auto qemu_id = store_->QemuId("hq");
      ASSERT_TRUE(qemu_id.ok());
      auto id = QemuIdentityForId(*qemu_id, false);
      ASSERT_TRUE(id.ok());
      std::string u = std::to_string(id->uid);
      EXPECT_EQ(st["Uid"], u + "\t" + u + "\t" + u + "\t" + u);
      EXPECT_EQ(st["Gid"], u + "\t" + u + "\t" + u + "\t" + u);
      EXPECT_EQ(st["Groups"], "");
      EXPECT_EQ(st["CapEff"], "0000000000000000");
      EXPECT_EQ(st["CapPrm"], "0000000000000000");
    }
    EXPECT_EQ(st["Seccomp"], "2");
    EXPECT_EQ(st["NoNewPrivs"], "1");
    auto cmdline = Env::Default()->ReadFile("/proc/" + std::to_string(qemu) + "/cmdline", 1 << 20);
    ASSERT_TRUE(cmdline.ok());
    EXPECT_NE(cmdline->find(std::string("-nodefaults") + '\0'), std::string::npos);
    EXPECT_NE(cmdline->find("on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny"),
              std::string::npos);
    // QEMU opens nothing of the store by path: no store path on its command line.
    EXPECT_EQ(cmdline->find(root_), std::string::npos);
    // QEMU's environment is PATH and LANG=C; the supervisor's holds nothing of the caller's shell.
    auto names = [](const std::string& text) {
      std::vector<std::string> out;
      for (const std::string& e : Split(text, '\0')) {
        if (!e.empty()) out.push_back(e.substr(0, e.find('=')));
      }
      return out;
    };
    auto qemu_env = Env::Default()->ReadFile("/proc/" + std::to_string(qemu) + "/environ", 1 << 20);
    ASSERT_TRUE(qemu_env.ok()) << qemu_env.error().ToString();
    EXPECT_EQ(qemu_env->find(exported_key), std::string::npos);
    EXPECT_EQ(names(*qemu_env), (std::vector<std::string>{"PATH", "LANG"}));
    pid_t sup = LivePid(RunPathsFor(*store_, "hq").supervisor_pid);
    ASSERT_GT(sup, 0);
    auto sup_env = Env::Default()->ReadFile("/proc/" + std::to_string(sup) + "/environ", 1 << 20);
    ASSERT_TRUE(sup_env.ok()) << sup_env.error().ToString();
    EXPECT_EQ(sup_env->find(exported_key), std::string::npos);
    EXPECT_EQ(sup_env->find("ANTHROPIC_API_KEY"), std::string::npos);
    EXPECT_NE(sup_env->find(std::string("LANG=C") + '\0'), std::string::npos)
        << Join(names(*sup_env), " ");
    // Its own mount namespace (vm/qemu_jail.h), with the repository's git config read-only.
    std::string q = "/proc/" + std::to_string(qemu);
    EXPECT_NE(fs::read_symlink(q + "/ns/mnt"), fs::read_symlink("/proc/self/ns/mnt"));
    auto mountinfo = Env::Default()->ReadFile(q + "/mountinfo", 1 << 20);
    ASSERT_TRUE(mountinfo.ok());
    EXPECT_NE(mountinfo->find(repo + "/.git/config ro,"), std::string::npos) << *mountinfo;
  };
  expect_hardened();

  int code = -1;
  // Shares (issue 38): the guest's user writes a folder of root's as its owner, and what it makes
  // is root's on the host; another user's private file and directory stay closed even to the
  // guest's root (QEMU acts as the folder's owner, not as root).
  EXPECT_EQ(Exec("hq", "echo from-guest > /mnt/rw/new.txt && cat /mnt/rw/new.txt && stat -c %u /mnt/rw/new.txt", &code),
            "from-guest\n1000\n");
  EXPECT_EQ(code, 0);
  EXPECT_EQ(*Env::Default()->ReadFile(rw + "/new.txt"), "from-guest\n");
  struct stat made;
  ASSERT_EQ(stat((rw + "/new.txt").c_str(), &made), 0);
  EXPECT_EQ(made.st_uid, 0u);
  EXPECT_EQ(Exec("hq", "cat /mnt/other/private", &code, "root"), "");
  EXPECT_NE(code, 0);
  Exec("hq", "echo x > /mnt/other/closed/planted", &code, "root");
  EXPECT_NE(code, 0);
  EXPECT_FALSE(fs::exists(other + "/closed/planted"));

  // The guest cannot make host git run code: every write to what host git executes from fails;
  // its own git still commits and branches; host `git status` then runs nothing.
  {
    std::string evil = "printf '[core]\\n\\tfsmonitor = \"touch " + canary + "; false\"\\n'";
    std::string script = "cd /mnt/repo; for t in .git/config .git/config.worktree .git/commondir "
                         ".git/hooks/pre-commit .git/info/attributes .git/modules/x/config "
                         ".git/worktrees/x/commondir; do "
                         "(mkdir -p $(dirname $t) && " + evil + " >> $t) 2>/dev/null && echo WROTE $t; done; "
                         "mv .git .git-old 2>/dev/null && echo WROTE rename; "
                         "git -c user.name=g -c user.email=g@g commit -q --allow-empty -m from-guest && "
                         "git branch guest-branch && echo COMMITTED";
    EXPECT_EQ(Exec("hq", script, &code), "COMMITTED\n");
    EXPECT_NE(host_git("log --oneline main").find("from-guest"), std::string::npos);
    EXPECT_NE(host_git("branch").find("guest-branch"), std::string::npos);
    EXPECT_EQ(host_git("status --porcelain").find("fatal"), std::string::npos);
    EXPECT_FALSE(fs::exists(canary)) << "host git ran the guest's code";
  }
  // Issue 38 as root: the guest's own user works in root's repository as its owner, and nothing
  // it does below the share makes host git run its code.
  {
    std::string out = Exec("hq", SharedRepoGuestScript("/mnt/repo", canary), &code);
    EXPECT_NE(out.find("SHARED-REPO-DONE"), std::string::npos) << out;
    ExpectSharedRepoSafe(repo, 0, canary, out, [](std::vector<std::string> argv) { return argv; });
  }
  // The third owner's repository: the guest's own user commits, and reads status and log, as its
  // owner; what it made is 4242's on the host, and 4242's git uses it with no complaint.
  {
    std::string out = Exec("hq", "cd /mnt/third && echo guest > third.txt && git add -A && "
                           "git -c user.name=g -c user.email=g@g commit -q -m third-commit && "
                           "git status --porcelain && git log --format=%s -1 && stat -c %u third.txt",
                           &code);
    EXPECT_EQ(code, 0) << out;
    EXPECT_EQ(out, "third-commit\n1000\n");
    struct stat st;
    ASSERT_EQ(stat((third + "/third.txt").c_str(), &st), 0);
    EXPECT_EQ(st.st_uid, 4242u);
    auto owner_git = RunProcess({"setpriv", "--reuid=4242", "--regid=4242", "--clear-groups", "env", "-i",
                                 "HOME=/nonexistent", "PATH=/usr/sbin:/usr/bin:/sbin:/bin", "sh", "-c",
                                 "cd " + third + " && GIT_CONFIG_NOSYSTEM=1 git status --porcelain 2>&1 && "
                                 "git log --format=%s 2>&1"});
    ASSERT_TRUE(owner_git.ok());
    EXPECT_EQ(owner_git->out, "third-commit\nhost\n");
  }

  // exec -it: the caller's window size, then a resize.
  {
    int master = -1;
    winsize ws{30, 100, 0, 0};
    std::vector<std::string> args = {exe_, "--store", root_, "exec", "-i", "-t", "hq", "--",
                                     "sh", "-c", "stty size; while read x; do stty size; done"};
    pid_t child = forkpty(&master, nullptr, nullptr, &ws);
    ASSERT_GE(child, 0);
    if (child == 0) {
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(exe_.c_str(), argv.data());
      _exit(127);
    }
    std::string screen;
    EXPECT_TRUE(ReadUntil(master, &screen, "30 100", std::chrono::seconds(60))) << screen;
    winsize bigger{40, 120, 0, 0};
    ASSERT_EQ(ioctl(master, TIOCSWINSZ, &bigger), 0);  // the kernel sends SIGWINCH to `cloister`
    bool resized = false;
    for (int i = 0; i < 30 && !resized; ++i) {
      ASSERT_EQ(write(master, "\r", 1), 1);
      resized = ReadUntil(master, &screen, "40 120", std::chrono::seconds(2));
    }
    EXPECT_TRUE(resized) << screen;
    ASSERT_EQ(write(master, "\x04", 1), 1);  // EOF ends the loop
    int status = WaitExit(child, std::chrono::seconds(60));
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status << screen;
    close(master);
  }

  // Signals: SIGINT reaches the guest command's trap; SIGTERM kills a command without one.
  {
    int out = -1;
    pid_t p = SpawnCloisterPiped({"exec", "hq", "--", "sh", "-c",
                                  "trap 'echo got-int; exit 7' INT; echo armed; "
                                  "while :; do sleep 1; done"}, &out);
    ASSERT_GT(p, 0);
    std::string buf;
    ASSERT_TRUE(ReadUntil(out, &buf, "armed", std::chrono::seconds(60))) << buf;
    ASSERT_EQ(kill(p, SIGINT), 0);
    EXPECT_TRUE(ReadUntil(out, &buf, "got-int", std::chrono::seconds(30))) << buf;
    int status = WaitExit(p, std::chrono::seconds(30));
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 7) << status;
    close(out);

    p = SpawnCloisterPiped({"exec", "hq", "--", "sh", "-c", "echo armed; exec sleep 100000"}, &out);
    ASSERT_GT(p, 0);
    buf.clear();
    ASSERT_TRUE(ReadUntil(out, &buf, "armed", std::chrono::seconds(60))) << buf;
    ASSERT_EQ(kill(p, SIGTERM), 0);
    status = WaitExit(p, std::chrono::seconds(30));
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 128 + SIGTERM) << status;
    close(out);
    EXPECT_EQ(Exec("hq", "ps -o args 2>/dev/null | grep -c '[s]leep 100000'"), "0\n");
  }

  // Reboot: a guest process is gone, home survives, a new checkpoint, the agent answers again.
  std::string boot_id = Exec("hq", "cat /proc/sys/kernel/random/boot_id");
  Exec("hq", "setsid sleep 424242 </dev/null >/dev/null 2>&1 & echo h > /home/dev/h.txt && sync", &code);
  ASSERT_EQ(code, 0);
  EXPECT_EQ(Exec("hq", "ps -o args | grep -c '[s]leep 424242'"), "1\n");
  pid_t old_qemu = QemuPid("hq");
  r = Cloister({"reboot", "hq"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(DeriveStatus(RunPathsFor(*store_, "hq")).state, VmState::kRunning);
  EXPECT_NE(QemuPid("hq"), old_qemu);
  EXPECT_NE(Exec("hq", "cat /proc/sys/kernel/random/boot_id"), boot_id);
  EXPECT_EQ(Exec("hq", "ps -o args | grep -c '[s]leep 424242'"), "0\n");
  EXPECT_EQ(Exec("hq", "cat /home/dev/h.txt"), "h\n");
  EXPECT_EQ(CheckpointCount("hq"), 2u);
  expect_hardened();
  Stop("hq");
}

// A non-root CLI (issue 15 item 5): QEMU runs as the user, in a user and mount namespace of its
// own (no capability, the shared repository's git config a read-only bind, /tmp an empty tmpfs),
// and the guest's writes to that config fail while the share works. What QEMU can open there is
// vm_jail_test's (the same jail, with a shell in QEMU's place). Issue 38 with a user whose uid is
// not the guest user's (1000): the guest's user works in the user's repository as its owner, what
// it makes is the user's, and nothing it does there makes the user's git run its code.
TEST_F(VmE2eTest, NonRootCliRunsQemuInItsOwnNamespacesUnderTheJail) {
  if (geteuid() != 0) GTEST_SKIP() << "makes a temporary account";
  std::string user = "cl-jail-" + std::to_string(getpid());
  uid_t uid = 23000;  // not 1000, whatever accounts this host has
  while (getpwuid(uid) != nullptr || getgrgid(uid) != nullptr) ++uid;
  auto add = RunProcess({"useradd", "-m", "-u", std::to_string(uid), "-U", "-s", "/bin/sh", user});
  ASSERT_TRUE(add.ok() && add->exit_code == 0) << (add.ok() ? add->err : add.error().ToString());
  struct Cleanup {
    std::string user;
    pid_t run = -1;
    ~Cleanup() {
      if (run > 0 && !TryReap(run)) {
        kill(run, SIGTERM);  // `run --rm` stops and deletes its workspace
        if (!WaitChild(run, std::chrono::minutes(2))) kill(run, SIGKILL);
      }
      (void)RunProcess({"userdel", "-r", "-f", user});
    }
  } cleanup{user};
  std::string home = "/home/" + user;
  struct stat hs;
  ASSERT_EQ(stat(home.c_str(), &hs), 0);
  std::string ids = "--reuid=" + std::to_string(hs.st_uid);
  auto as_user = [&](std::vector<std::string> argv) {
    argv.insert(argv.begin(), {"setpriv", ids, "--regid=" + std::to_string(hs.st_gid), "--init-groups",
                               "env", "-i", "HOME=" + home, "PATH=/usr/sbin:/usr/bin:/sbin:/bin"});
    return argv;
  };
  std::string repo = home + "/proj";
  std::string canary = home + "/canary";
  auto made = RunProcess(as_user({"sh", "-c",
      "mkdir -p ~/.ssh " + repo + " && echo PLANTED > ~/.ssh/id_ed25519 && chmod 600 ~/.ssh/id_ed25519 && "
      "cd " + repo + " && git init -q -b main . && echo host > README && git add README && "
      "git -c user.name=h -c user.email=h@h commit -q -m host && " + kHostGitConfigSetup}));
  ASSERT_TRUE(made.ok() && made->exit_code == 0) << (made.ok() ? made->err : made.error().ToString());
  // The build tree may be closed to other users (a CI clone under /root): then the user gets
  // copies of the binaries and the image.
  std::string exe = exe_;
  std::string image = image_dir() + "/disk.raw";
  auto usable = [&](const std::string& path) {
    auto t = RunProcess(as_user({"test", "-r", path, "-a", "-r", fs::path(path).parent_path().string()}));
    return t.ok() && t->exit_code == 0;
  };
  if (!usable(exe) || !usable(fs::path(exe_).parent_path().string() + "/../guest/cloister-agent")) {
    fs::create_directories(home + "/bin");
    fs::copy_file(exe_, home + "/bin/cloister");
    fs::copy_file(fs::path(exe_).parent_path() / ".." / "guest" / "cloister-agent", home + "/bin/cloister-agent");
    exe = home + "/bin/cloister";
  }
  if (!usable(image)) {
    auto cp = RunProcess({"cp", "-r", "--sparse=always", image_dir(), home + "/image"});
    ASSERT_TRUE(cp.ok() && cp->exit_code == 0);
    image = home + "/image/disk.raw";
  }
  ASSERT_TRUE(RunProcess({"chown", "-R", std::to_string(hs.st_uid) + ":" + std::to_string(hs.st_gid), home}).ok());
  ASSERT_TRUE(usable(exe) && usable(image)) << exe << " " << image;

  std::string out = home + "/run.out";
  SpawnOptions so;
  so.stdout_path = out;
  auto run = SpawnProcess(as_user({exe, "--store", home + "/store", "run", "--rm", "--accel", "tcg",
                                   "--image", image, "-v", repo + ":/mnt/proj", "--", "sh", "-c",
                                   "cd /mnt/proj; echo x >> .git/config || echo CONFIG-DENIED; "
                                   "echo hi > f && (" + SharedRepoGuestScript("/mnt/proj", canary) +
                                   ") && echo SHARE-OK; sleep 100000"}),
                          so);
  ASSERT_TRUE(run.ok()) << run.error().ToString();
  cleanup.run = *run;
  auto output = [&] { auto o = Env::Default()->ReadFile(out, 1 << 20); return o.ok() ? *o : ""; };
  std::optional<int> ended;  // `run` gave up (QEMU exited, a refusal): no point waiting on
  auto share_ok = [&] {
    if (!ended) ended = TryReap(*run);
    return ended.has_value() || output().find("SHARE-OK") != std::string::npos;
  };
  if (!WaitFor(share_ok, std::chrono::minutes(6)) || output().find("SHARE-OK") == std::string::npos) {
    std::string logs;  // the account's home goes with it: show why here
    for (const auto& e : fs::recursive_directory_iterator(home + "/store", fs::directory_options::skip_permission_denied)) {
      std::string n = e.path().filename().string();
      if (n != "console.log" && n != "supervisor.log") continue;
      auto text = Env::Default()->ReadFile(e.path().string(), 1 << 20);
      if (text.ok()) logs += "== " + e.path().string() + "\n" + text->substr(text->size() > 6000 ? text->size() - 6000 : 0);
    }
    ADD_FAILURE() << output() << logs;
  }
  EXPECT_NE(output().find("CONFIG-DENIED"), std::string::npos) << output();
  ASSERT_FALSE(ended.has_value()) << "run ended early: " << *ended << "\n" << output();
  auto pids = RunProcess({"pgrep", "-u", std::to_string(hs.st_uid), "qemu-system"});
  ASSERT_TRUE(pids.ok());
  pid_t qemu = atoi(pids->out.c_str());
  ASSERT_GT(qemu, 0) << output();
  auto st = ProcStatus(qemu);
  std::string u = std::to_string(hs.st_uid);
  EXPECT_EQ(st["Uid"], u + "\t" + u + "\t" + u + "\t" + u);
  EXPECT_EQ(st["CapEff"], "0000000000000000");
  EXPECT_EQ(st["NoNewPrivs"], "1");
  EXPECT_EQ(st["Seccomp"], "2");
  std::string q = "/proc/" + std::to_string(qemu);
  EXPECT_NE(fs::read_symlink(q + "/ns/user"), fs::read_symlink("/proc/self/ns/user"));
  EXPECT_NE(fs::read_symlink(q + "/ns/mnt"), fs::read_symlink("/proc/self/ns/mnt"));
  auto mountinfo = Env::Default()->ReadFile(q + "/mountinfo", 1 << 20);
  ASSERT_TRUE(mountinfo.ok());
  EXPECT_NE(mountinfo->find(repo + "/.git/config ro,"), std::string::npos) << *mountinfo;
  bool empty_tmp = false;
  std::istringstream lines(*mountinfo);
  for (std::string line; std::getline(lines, line);) {
    if (line.find(" /tmp ") != std::string::npos && line.find(" cloister-empty ") != std::string::npos) empty_tmp = true;
  }
  EXPECT_TRUE(empty_tmp) << *mountinfo;
  EXPECT_EQ(*Env::Default()->ReadFile(repo + "/f"), "hi\n");
  EXPECT_EQ(Env::Default()->ReadFile(repo + "/.git/config")->find("\nx\n"), std::string::npos);
  ExpectSharedRepoSafe(repo, uid, canary, output(), as_user);
  kill(*run, SIGTERM);
  EXPECT_TRUE(WaitChild(*run, std::chrono::minutes(2)).has_value());
  cleanup.run = -1;
}

// `run --rm` after QEMU itself crashes (kill -9 of the qemu process, not of the supervisor).
TEST_F(VmE2eTest, RunRmLeavesNothingAfterAQemuCrash) {
  pid_t run = SpawnCloister({"run", "--rm", "--accel", "tcg", "--image",
                             image_dir() + "/disk.raw", "--", "sleep", "100000"});
  ASSERT_GT(run, 0);
  std::string name;
  ASSERT_TRUE(WaitFor([&] {
    auto l = store_->List();
    if (!l.ok() || l->empty()) return false;
    name = (*l)[0].name;
    return DeriveStatus(RunPathsFor(*store_, name)).state == VmState::kRunning;
  }, std::chrono::minutes(5)));
  pid_t qemu = QemuPid(name);
  ASSERT_GT(qemu, 0);
  ASSERT_EQ(kill(qemu, SIGKILL), 0);
  int status = WaitExit(run, std::chrono::minutes(2));
  EXPECT_NE(status, -1) << "run did not end after QEMU died";
  EXPECT_TRUE(WaitFor([&] { return !fs::exists(store_->Paths(name).dir); }, std::chrono::seconds(60)));
  EXPECT_EQ(MacRegistry().find(name), std::string::npos) << MacRegistry();
  EXPECT_EQ(DeriveStatus(RunPathsFor(*store_, name)).state, VmState::kStopped);
}

}  // namespace
}  // namespace cloister::vm
