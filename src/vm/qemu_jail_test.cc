// QemuJail with real processes, real git and real mounts (issue 15 items 2 and 5, issue 38), as a
// non-root caller (user + mount namespace, Landlock) and as root (mount namespace, idmapped shares,
// Landlock, uid drop in a user namespace), with the share guard served as the supervisor serves
// it: a shell run exactly as QEMU is (SpawnProcess + before_exec = Enter, then StartGuard) plays
// the compromised QEMU / the guest's writes through 9p. Needs root to make the users' files (label
// integration).
#include "vm/qemu_jail.h"

#include <fcntl.h>
#include <grp.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include <gtest/gtest.h>

#include "base/subprocess.h"
#include "vm/process.h"

namespace cloister::vm {
namespace {

namespace fs = std::filesystem;

// No account has these (like QEMU's uids, vm/qemu_access.h).
constexpr uid_t kUser = 0x5BFE0001;
constexpr uid_t kQemuUid = 0x5BFE0002;

std::string Read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

void Write(const std::string& path, const std::string& content, mode_t mode = 0644) {
  std::ofstream(path) << content;
  chmod(path.c_str(), mode);
}

void ChownTree(const std::string& path, uid_t uid) {
  lchown(path.c_str(), uid, uid);
  for (const auto& e : fs::recursive_directory_iterator(path)) lchown(e.path().c_str(), uid, uid);
}

std::string Git(const std::string& dir, const std::string& args) {
  auto r = RunProcess({"sh", "-c", "cd '" + dir + "' && GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null git -c safe.directory='*' " + args + " 2>&1"});
  return r.ok() ? r->out : r.error().ToString();
}

// What the jailed shell tries: each line "NAME ok|denied".
constexpr const char* kScript = R"SH(
export GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null HOME=/nonexistent
try() { name=$1; shift; if "$@" >&2 2>&2; then echo "RESULT $name ok"; else echo "RESULT $name denied"; fi; }
try read-vault-key cat "$VAULT_KEY"
try read-ssh-key cat "$SSH_KEY"
try list-home ls "$USER_HOME"
try see-agent-socket test -e "$AGENT_SOCK"
try read-etc-passwd cat /etc/passwd
cd /proc/self/fd/$PROJ_FD || exit 99
try read-share cat README
try write-share sh -c 'echo guest > guest.txt'
evil="[core]
	fsmonitor = \"touch $CANARY; false\""
try write-config sh -c "printf '%s\n' '$evil' >> .git/config"
try write-config-worktree sh -c "printf '%s\n' '$evil' > .git/config.worktree"
try write-commondir sh -c 'echo ../evil > .git/commondir'
try add-hook sh -c 'printf "#!/bin/sh\ntouch $CANARY\n" > .git/hooks/pre-commit'
try write-info sh -c 'echo x > .git/info/exclude'
try add-module mkdir .git/modules/evil
try write-module-config sh -c "printf '%s\n' '$evil' >> .git/modules/sub/config"
try add-module-hook sh -c 'echo x > .git/modules/sub/hooks/post-checkout'
try add-worktree mkdir .git/worktrees/evil
try rename-gitdir mv .git .git-old
try replace-config sh -c 'cp .git/config .git/config.new && mv -f .git/config.new .git/config'
try rename-hooks mv .git/hooks .git/hooks-old
try rename-module mv .git/modules/sub .git/modules/sub2
try module-objects sh -c 'echo x > .git/modules/sub/objects/probe && rm .git/modules/sub/objects/probe'
try commit git -c user.name=g -c user.email=g@g commit -q --allow-empty -m in-jail
try branch git branch in-jail-branch
try push git push -q "$REMOTE" HEAD:refs/heads/pushed
try fetch git fetch -q "$REMOTE" refs/heads/main:refs/remotes/r/main
try whoami sh -c '[ "$(id -u)" = 1000 ] && [ "$(stat -c %u README)" = 1000 ]'
try create-in-home sh -c 'echo x > "$USER_HOME/planted"'
at_fd='import os, sys; fd = os.open(sys.argv[1], os.O_PATH); os.mkdir("by-fd", dir_fd=fd); os.close(os.open("by-fd-file", os.O_CREAT | os.O_WRONLY, 0o644, dir_fd=fd))'
try by-fd-in-home /usr/bin/python3 -c "$at_fd" "$USER_HOME"
try by-fd-in-share /usr/bin/python3 -c "$at_fd" .
enosys='import ctypes, sys; libc = ctypes.CDLL(None, use_errno=True); r = libc.syscall(int(sys.argv[1]), -100, b"x", ctypes.create_string_buffer(128), 24); sys.exit(0 if r == -1 and ctypes.get_errno() == 38 else 1)'
try io-uring-enosys /usr/bin/python3 -c "$enosys" 425
try openat2-enosys /usr/bin/python3 -c "$enosys" 437
try nested-init git init -q nested
try nested-config sh -c "printf '%s\n' '$evil' >> nested/.git/config"
try nested-mkdir mkdir -p n2/.git
try nested-mkdir-case mkdir -p n3/.GIT
try head-outside sh -c 'mkdir -p evil/objects evil/refs && echo "ref: refs/heads/main" > evil/HEAD'
try evil-config sh -c "printf '%s\n' '$evil' > evil/config"
try gitfile sh -c 'mkdir -p gf && echo "gitdir: ../evil" > gf/.git'
try rename-to-git sh -c 'mkdir -p rn/x && mv rn/x rn/.git'
try symlink-git sh -c 'mkdir -p sl && ln -s ../evil sl/.git'
try hardlink-git sh -c 'echo x > hl-src && mkdir -p hl && ln hl-src hl/.git'
try fixture-objects mkdir fixture/objects
try fixture-commondir sh -c 'echo ../.git > fixture/commondir'
try vendored-config sh -c "printf '%s\n' '$evil' >> vendor/lib/.git/config"
try vendored-hook sh -c 'echo x > vendor/lib/.git/hooks/pre-commit'
try vendored-rename mv vendor/lib/.git vendor/lib/.git-old
try vendored-commit git -C vendor/lib -c user.name=g -c user.email=g@g commit -q --allow-empty -m in-jail
try bare-config sh -c "printf '%s\n' '$evil' >> fixtures/bare.git/config"
try setuid sh -c 'cp /bin/true suid && chmod u+s suid'
try setgid-file sh -c 'echo x > sgf && chmod g+s sgf'
try setgid-dir sh -c 'mkdir sgd && chmod g+s sgd && mkdir sgd/sub && echo x > sgd/sub/f'
try fifo mkfifo fifo1
try rename-file sh -c 'echo x > r1 && mv r1 r2 && ln r2 r3'
try symlink-file ln -s README readme-link
cd /proc/self/fd/$WT_FD || exit 98
try write-gitfile sh -c 'echo "gitdir: /evil" > .git'
cd /proc/self/fd/$RO_FD || exit 97
try read-ro cat README
try write-ro sh -c 'echo x > planted'
)SH";

class QemuJailTest : public ::testing::TestWithParam<bool> {  // true: the caller is root
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root to make the test users' files";
    // Not under /tmp: the jail covers /tmp with an empty tmpfs, and git in the shell wants its
    // working directory's path to resolve.
    char t[] = "/var/lib/cloister-jail-test.XXXXXX";
    ASSERT_NE(mkdtemp(t), nullptr);
    root_ = t;
    chmod(root_.c_str(), 0755);
    owner_ = GetParam() ? kQemuUid : kUser;  // whose files QEMU could open if nothing stopped it
    home_ = root_ + "/home";
    fs::create_directories(home_ + "/.ssh");
    fs::create_directories(home_ + "/.local/share/cloister");
    Write(home_ + "/.ssh/id_ed25519", "SSH-PRIVATE-KEY\n", 0600);
    Write(home_ + "/.local/share/cloister/vault.key", "VAULT-MASTER-KEY\n", 0600);
    proj_ = home_ + "/proj";
    remote_ = home_ + "/proj/remote.git";
    fs::create_directories(proj_);
    Write(proj_ + "/README", "project\n");
    ASSERT_NE(Git(proj_, "init -q -b main ."), "x");
    ASSERT_EQ(Git(proj_, "-c user.name=h -c user.email=h@h commit -q --allow-empty -m host"), "");
    // A submodule's git dir, as `git submodule add` leaves it.
    ASSERT_EQ(Git(root_, "init -q --bare " + proj_ + "/.git/modules/sub"), "");
    ASSERT_EQ(Git(root_, "init -q --bare -b main " + remote_), "");
    ASSERT_EQ(Git(proj_, "push -q " + remote_ + " main"), "");
    // Repositories the host made below the share (issue 38): a vendored clone, a bare test
    // fixture, and a directory holding a file named HEAD that is no git dir.
    fs::create_directories(proj_ + "/vendor/lib");
    ASSERT_EQ(Git(proj_ + "/vendor/lib", "init -q -b main . && git -c user.name=h -c user.email=h@h commit -q --allow-empty -m v"), "");
    ASSERT_EQ(Git(root_, "init -q --bare " + proj_ + "/fixtures/bare.git"), "");
    fs::create_directories(proj_ + "/fixture");
    Write(proj_ + "/fixture/HEAD", "not a ref\n");
    wt_ = home_ + "/wt";
    fs::create_directories(wt_);
    Write(wt_ + "/.git", "gitdir: " + proj_ + "/.git\n");
    ro_ = root_ + "/ro";
    fs::create_directories(ro_);
    Write(ro_ + "/README", "read-only\n");
    agent_dir_ = "/tmp/" + fs::path(root_).filename().string();
    fs::create_directories(agent_dir_);
    Write(agent_dir_ + "/agent.sock", "");
    ChownTree(home_, owner_);
    ChownTree(ro_, owner_);
    ChownTree(root_ + "/home/proj", GetParam() ? 0 : kUser);  // root's shares stay the user's (root)
    chmod(home_.c_str(), 0700);
    if (GetParam()) {  // root's shares are root's: QEMU acts as their owner through the idmap
      chmod(home_.c_str(), 0711);
      ChownTree(wt_, 0);
    }
  }
  void TearDown() override {
    if (!root_.empty()) fs::remove_all(root_);
    if (!agent_dir_.empty()) fs::remove_all(agent_dir_);
  }

  // Runs kScript in the jail; as the non-root user when the caller is not root. Returns each
  // "NAME ok|denied" line as a map, and the jail's mounts in *mounts.
  std::map<std::string, std::string> RunJailed(std::vector<JailMount>* mounts, std::string* log,
                                               const char* script = kScript) {
    std::string out = root_ + "/out.txt";
    Write(out, "", 0666);
    int pipefd[2];
    EXPECT_EQ(pipe(pipefd), 0);
    pid_t pid = fork();
    if (pid == 0) {
      close(pipefd[0]);
      if (!GetParam()) {
        if (setgroups(0, nullptr) != 0 || setresgid(kUser, kUser, kUser) != 0 ||
            setresuid(kUser, kUser, kUser) != 0) _exit(120);
        prctl(PR_SET_DUMPABLE, 1);  // as a user's own CLI is (the uid change cleared it)
      }
      int proj = open(proj_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
      int wt = open(wt_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
      int ro = open(ro_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
      if (proj < 0 || wt < 0 || ro < 0) _exit(121);
      // The user's own HOME, as the shell that runs cloister has it (its git configuration).
      setenv("HOME", home_.c_str(), 1);
      JailSpec spec;
      spec.shares = {{proj_, proj, false}, {wt_, wt, false}, {ro_, ro, true}};
      if (GetParam()) spec.identity = {true, kQemuUid, kQemuUid, {}};
      auto jail = QemuJail::Prepare(spec);
      if (!jail.ok()) {
        std::string e = "PREPARE " + jail.error().ToString() + "\n";
        (void)!write(pipefd[1], e.data(), e.size());
        _exit(122);
      }
      for (const JailMount& m : (*jail)->mounts()) {
        std::string line = "MOUNT " + m.relative + (m.read_only ? " ro" : " pin") + "\n";
        (void)!write(pipefd[1], line.data(), line.size());
      }
      setenv("VAULT_KEY", (home_ + "/.local/share/cloister/vault.key").c_str(), 1);
      setenv("SSH_KEY", (home_ + "/.ssh/id_ed25519").c_str(), 1);
      setenv("USER_HOME", home_.c_str(), 1);
      setenv("AGENT_SOCK", (agent_dir_ + "/agent.sock").c_str(), 1);
      setenv("PROJ_FD", std::to_string(proj).c_str(), 1);
      setenv("WT_FD", std::to_string(wt).c_str(), 1);
      setenv("RO_FD", std::to_string(ro).c_str(), 1);
      setenv("REMOTE", remote_.c_str(), 1);
      setenv("CANARY", (home_ + "/canary").c_str(), 1);  // the host user may write it
      SpawnOptions so;
      so.stdout_path = out;
      so.keep_fds = {proj, wt, ro};
      const QemuJail* j = jail->get();
      so.before_exec = [j] { return j->Enter(); };
      so.before_exec_error = &QemuJail::StepName;
      auto child = SpawnProcess({"sh", "-c", script}, so);
      if (!child.ok()) _exit(123);
      if (auto guard = (*jail)->StartGuard(*child); !guard.ok()) {
        std::string e = "GUARD " + guard.error().ToString() + "\n";
        (void)!write(pipefd[1], e.data(), e.size());
        kill(*child, SIGKILL);
        _exit(125);
      }
      auto st = WaitChild(*child, std::chrono::minutes(5));
      _exit(st ? *st : 124);
    }
    close(pipefd[1]);
    std::string info;
    char buf[4096];
    for (ssize_t n; (n = read(pipefd[0], buf, sizeof(buf))) > 0;) info.append(buf, n);
    close(pipefd[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    *log = info + Read(out);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status << "\n" << *log;
    std::map<std::string, std::string> result;
    std::istringstream lines(Read(out));
    for (std::string line; std::getline(lines, line);) {
      auto sp = line.rfind(' ');
      if (line.rfind("RESULT ", 0) == 0 && sp > 7) result[line.substr(7, sp - 7)] = line.substr(sp + 1);
    }
    std::istringstream ml(info);
    for (std::string line; std::getline(ml, line);) {
      if (line.rfind("MOUNT ", 0) == 0) mounts->push_back({proj_, line.substr(6), false, false});
    }
    return result;
  }

  std::string root_, home_, proj_, remote_, wt_, ro_, agent_dir_;
  uid_t owner_ = 0;
};

TEST_P(QemuJailTest, GuestCannotPlantHostGitCodeAndQemuOpensNoFileByPath) {
  std::vector<JailMount> mounts;
  std::string log;
  auto r = RunJailed(&mounts, &log);
  ASSERT_FALSE(r.empty()) << log;
  // Not vacuous: what QEMU must be able to do still works.
  EXPECT_EQ(r["read-share"], "ok") << log;
  EXPECT_EQ(r["write-share"], "ok") << log;
  EXPECT_EQ(r["read-ro"], "ok") << log;
  EXPECT_EQ(r["module-objects"], "ok") << log;
  for (const char* op : {"commit", "branch", "push", "fetch"}) EXPECT_EQ(r[op], "ok") << op << "\n" << log;
  // Item 5: no file by path (the planted keys are the would-be QEMU's own uid's files).
  for (const char* op : {"read-vault-key", "read-ssh-key", "list-home", "see-agent-socket", "read-etc-passwd"}) {
    EXPECT_EQ(r[op], "denied") << op << "\n" << log;
  }
  // Item 2: every path host git executes from is read-only to the guest.
  for (const char* op : {"write-config", "write-config-worktree", "write-commondir", "add-hook",
                         "write-info", "add-module", "write-module-config", "add-module-hook",
                         "add-worktree", "rename-gitdir", "replace-config", "rename-hooks",
                         "rename-module", "write-gitfile", "write-ro"}) {
    EXPECT_EQ(r[op], "denied") << op << "\n" << log;
  }
  EXPECT_FALSE(fs::exists(ro_ + "/planted"));
  EXPECT_EQ(Read(wt_ + "/.git"), "gitdir: " + proj_ + "/.git\n");
  // The guest's commits, branches and pushes landed; host git in the folder runs nothing.
  EXPECT_NE(Git(proj_, "log --oneline main").find("in-jail"), std::string::npos);
  EXPECT_NE(Git(proj_, "branch").find("in-jail-branch"), std::string::npos);
  EXPECT_NE(Git(remote_, "branch").find("pushed"), std::string::npos);
  std::string status = Git(proj_, "status --porcelain");
  EXPECT_EQ(status.find("fatal"), std::string::npos) << status;
  EXPECT_EQ(Git(proj_, "-c user.name=h -c user.email=h@h commit -q --allow-empty -m host2"), "");
  EXPECT_FALSE(fs::exists(home_ + "/canary")) << "host git ran the guest's code";
  EXPECT_FALSE(fs::exists(proj_ + "/.git/commondir"));  // refused, not made (the guard)
  EXPECT_TRUE(fs::is_directory(proj_ + "/.git/modules/sub/hooks"));
  // Nothing of the jail reached the host's mount table.
  EXPECT_EQ(Read("/proc/self/mountinfo").find(proj_), std::string::npos);
}

// Issue 38: the guest's user is the share's owner both ways, and nothing it creates anywhere
// below a share is a git dir host git would use; the guard makes nothing outside the shares.
TEST_P(QemuJailTest, SharesMapTheOwnerAndNoRepositoryCanAppearBelowThem) {
  std::vector<JailMount> mounts;
  std::string log;
  auto r = RunJailed(&mounts, &log);
  ASSERT_FALSE(r.empty()) << log;
  const uid_t share_owner = GetParam() ? 0 : kUser;
  // The shell (QEMU) sees the share's owner as the guest's user, and what it makes is the owner's.
  EXPECT_EQ(r["whoami"], "ok") << log;
  for (const char* op : {"by-fd-in-share", "vendored-commit", "setgid-dir", "fifo", "rename-file", "symlink-file",
                         "io-uring-enosys", "openat2-enosys"}) {
    EXPECT_EQ(r[op], "ok") << op << "\n" << log;
  }
  for (const char* made : {"guest.txt", "by-fd", "by-fd-file", "sgd/sub/f", "r3", "readme-link"}) {
    struct stat st;
    ASSERT_EQ(lstat((proj_ + "/" + made).c_str(), &st), 0) << made << "\n" << log;
    EXPECT_EQ(st.st_uid, share_owner) << made;
  }
  struct stat sgd;
  ASSERT_EQ(stat((proj_ + "/sgd").c_str(), &sgd), 0);
  EXPECT_TRUE(sgd.st_mode & S_ISGID);
  // No git dir, gitfile or bare-repository shape appears; what the host made stays protected; no
  // set-user-ID or set-group-ID file; nothing is made outside the shares, by path or by fd.
  for (const char* op : {"create-in-home", "by-fd-in-home", "nested-init", "nested-config", "nested-mkdir",
                         "nested-mkdir-case", "head-outside", "gitfile", "rename-to-git",
                         "symlink-git", "hardlink-git", "fixture-objects", "fixture-commondir",
                         "vendored-config", "vendored-hook", "vendored-rename", "bare-config",
                         "setuid", "setgid-file"}) {
    EXPECT_EQ(r[op], "denied") << op << "\n" << log;
  }
  for (const char* planted : {"nested/.git", "n2/.git", "n3/.GIT", "evil/HEAD", "gf/.git", "rn/.git",
                              "sl/.git", "hl/.git", "fixture/objects", "fixture/commondir"}) {
    EXPECT_FALSE(fs::exists(fs::symlink_status(proj_ + "/" + planted))) << planted;
  }
  for (const char* outside : {"planted", "by-fd", "by-fd-file"}) EXPECT_FALSE(fs::exists(home_ + "/" + outside)) << outside;
  struct stat suid;
  if (lstat((proj_ + "/suid").c_str(), &suid) == 0) {
    EXPECT_FALSE(suid.st_mode & (S_ISUID | S_ISGID));
  }
  // Host git, as the share's owner and without safe.directory: every directory below the share
  // resolves to the git dir the host made for it, and status, diff and log there run nothing.
  auto host_git = [&](const std::string& dir, const std::string& args) {
    std::string cmd = "cd '" + dir + "' && GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null git " + args + " 2>&1";
    std::vector<std::string> argv = {"sh", "-c", cmd};
    if (!GetParam()) {
      argv.insert(argv.begin(), {"setpriv", "--reuid=" + std::to_string(kUser), "--regid=" + std::to_string(kUser),
                                 "--clear-groups"});
    }
    auto g = RunProcess(argv);
    return g.ok() ? g->out : g.error().ToString();
  };
  std::string status = host_git(proj_, "status --porcelain");
  EXPECT_EQ(status.find("dubious"), std::string::npos) << status;
  EXPECT_EQ(status.find("fatal"), std::string::npos) << status;
  std::map<std::string, std::string> own = {{"vendor/lib", "/vendor/lib/.git"}, {"fixtures/bare.git", "/fixtures/bare.git"},
                                            {"remote.git", "/remote.git"}};
  for (const auto& e : fs::recursive_directory_iterator(proj_)) {
    if (e.is_symlink() || !e.is_directory()) continue;
    std::string rel = e.path().lexically_relative(proj_).string();
    bool internal = false;
    for (const char* gitdir : {".git", "vendor/lib/.git", "fixtures/bare.git/", "remote.git/"}) {
      internal = internal || rel == gitdir || rel.rfind(std::string(gitdir) + (gitdir[strlen(gitdir) - 1] == '/' ? "" : "/"), 0) == 0;
    }
    if (internal) continue;
    std::string expect = proj_ + "/.git";
    for (const auto& [dir, gitdir] : own) {
      if (rel == dir || rel.rfind(dir + "/", 0) == 0) expect = proj_ + gitdir;
    }
    EXPECT_EQ(host_git(e.path().string(), "rev-parse --absolute-git-dir"), expect + "\n") << rel;
    host_git(e.path().string(), "status");
    host_git(e.path().string(), "diff");
    host_git(e.path().string(), "log -1");
  }
  EXPECT_FALSE(fs::exists(home_ + "/canary")) << "host git ran the guest's code";
}

// What the guest tries against the files host git's configuration names (issue 38): hooks in a
// husky `core.hooksPath` that exists and one that does not yet, include targets (the repository's
// and the user's global configuration's, present and missing), a `core.fsmonitor` script.
// Each plants `touch $CANARY.<case>` where host git would run it.
constexpr const char* kConfigScript = R"SH(
export GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null HOME=/nonexistent
try() { name=$1; shift; if "$@" >&2 2>&2; then echo "RESULT $name ok"; else echo "RESULT $name denied"; fi; }
plant() { printf '#!/bin/sh\ntouch %s\n' "$CANARY.$2" > "$1" && chmod +x "$1"; }
fsmonitor() { printf '[core]\n\tfsmonitor = "touch %s; false"\n' "$CANARY.$2" >> "$1"; }
# As QEMU's 9p server writes a file that exists: an open without O_CREAT.
write_existing() { /usr/bin/python3 -c 'import os, sys; fd = os.open(sys.argv[1], os.O_WRONLY | os.O_TRUNC); os.write(fd, sys.argv[2].encode())' "$@"; }
cd /proc/self/fd/$PROJ_FD || exit 99
try husky-write plant .husky/_/reference-transaction husky
try husky-new-hook plant .husky/_/post-index-change husky
swap() { mv husky2/.husky husky2/.husky-old && mkdir -p husky2/.husky/_ && plant husky2/.husky/_/reference-transaction swap; }
try husky-swap swap
githooks_mkdir() { mkdir vendor/lib/.githooks && plant vendor/lib/.githooks/reference-transaction githooks; }
githooks_rename() { mkdir hk2 && plant hk2/reference-transaction rename && mv hk2 hooks2/.githooks; }
githooks_symlink() { mkdir hk3 && plant hk3/reference-transaction symlink && ln -s ../hk3 hooks3/.githooks; }
try githooks-mkdir githooks_mkdir
try githooks-rename githooks_rename
try githooks-symlink githooks_symlink
try githooks-case mkdir vendor/lib/.GitHooks
try include-write fsmonitor .gitconfig-team include
try include-create fsmonitor .gitconfig-local include-new
try global-include-create fsmonitor .gitconfig-global global
try fsmonitor-script plant fsm/tools/fsmonitor.sh fsmonitor
try fsmonitor-script-open write_existing fsm/tools/fsmonitor.sh "$(printf '#!/bin/sh\ntouch %s\n' "$CANARY.fsmonitor-open")"
try include-write-open write_existing .gitconfig-team "$(printf '[core]\n\tfsmonitor = "touch %s; false"\n' "$CANARY.include-open")"
try husky-write-open write_existing .husky/_/pre-commit "$(printf '#!/bin/sh\ntouch %s\n' "$CANARY.husky-open")"
try fsmonitor-replace sh -c 'cp fsm/tools/fsmonitor.sh x.sh && mv -f x.sh fsm/tools/fsmonitor.sh'
try read-include cat .gitconfig-team
try user-hook sh -c 'echo "exit 0" > .husky/pre-commit'
try beside-hooks sh -c 'mkdir vendor/lib/.githooks-not && echo x > vendor/lib/.githooks-not/f'
try commit git -c user.name=g -c user.email=g@g commit -q --allow-empty -m in-jail
try fetch-in-jail git fetch -q "$REMOTE" refs/heads/main:refs/remotes/r/main
)SH";

// Issue 38: nothing the guest writes makes host git run a file its configuration names in the
// share: hooks paths (present or not), include targets, fsmonitor scripts; and host `git
// status`, `git fetch` from a local remote, `git diff` and `git log` run nothing the guest wrote.
TEST_P(QemuJailTest, HostGitConfigurationNamesNothingTheGuestCanWrite) {
  const uid_t share_owner = GetParam() ? 0 : kUser;
  auto host_git = [&](const std::string& dir, const std::string& args) {
    std::string cmd = "cd '" + dir + "' && HOME='" + home_ + "' GIT_CONFIG_NOSYSTEM=1 git " + args + " 2>&1";
    std::vector<std::string> argv = {"sh", "-c", cmd};
    if (!GetParam()) {
      argv.insert(argv.begin(), {"setpriv", "--reuid=" + std::to_string(kUser), "--regid=" + std::to_string(kUser),
                                 "--clear-groups"});
    }
    auto g = RunProcess(argv);
    return g.ok() ? g->out : g.error().ToString();
  };
  // The user's repositories, as husky and the user's own configuration leave them.
  ASSERT_EQ(Git(proj_, "config core.hooksPath .husky/_"), "");
  fs::create_directories(proj_ + "/.husky/_");
  Write(proj_ + "/.husky/_/pre-commit", "#!/bin/sh\nexit 0\n", 0755);
  Write(proj_ + "/.husky/pre-commit", "exit 0\n");
  ASSERT_EQ(Git(proj_ + "/vendor/lib", "config core.hooksPath .githooks"), "");  // not made yet
  std::map<std::string, std::string> repos = {{"cfg-include", "config include.path ../../.gitconfig-team"},
                                              {"cfg-missing", "config include.path ../../.gitconfig-local"},
                                              {"fsm", "config core.fsmonitor tools/fsmonitor.sh"},
                                              {"plain", "config user.name plain"},
                                              {"husky2", "config core.hooksPath .husky/_"},
                                              {"hooks2", "config core.hooksPath .githooks"},
                                              {"hooks3", "config core.hooksPath .githooks"}};
  for (const auto& [dir, config] : repos) {
    fs::create_directories(proj_ + "/" + dir);
    ASSERT_EQ(Git(proj_ + "/" + dir, "init -q -b main . && git -c user.name=h -c user.email=h@h commit -q --allow-empty -m h"), "");
    ASSERT_EQ(Git(proj_ + "/" + dir, config), "");
  }
  fs::create_directories(proj_ + "/husky2/.husky/_");
  Write(proj_ + "/husky2/.husky/_/pre-commit", "#!/bin/sh\nexit 0\n", 0755);
  Write(proj_ + "/.gitconfig-team", "[user]\n\tname = team\n");
  fs::create_directories(proj_ + "/fsm/tools");
  Write(proj_ + "/fsm/tools/fsmonitor.sh", "#!/bin/sh\nexit 1\n", 0755);
  Write(home_ + "/.gitconfig", "[include]\n\tpath = " + proj_ + "/.gitconfig-global\n");
  ChownTree(proj_, share_owner);
  lchown((home_ + "/.gitconfig").c_str(), owner_, owner_);

  std::vector<JailMount> mounts;
  std::string log;
  auto r = RunJailed(&mounts, &log, kConfigScript);
  ASSERT_FALSE(r.empty()) << log;
  for (const char* op : {"read-include", "user-hook", "beside-hooks", "commit", "fetch-in-jail"}) {
    EXPECT_EQ(r[op], "ok") << op << "\n" << log;
  }
  for (const char* op : {"husky-write", "husky-new-hook", "husky-swap", "githooks-mkdir", "githooks-rename",
                         "githooks-symlink", "githooks-case", "include-write", "include-create",
                         "global-include-create", "fsmonitor-script", "fsmonitor-replace", "fsmonitor-script-open",
                         "include-write-open", "husky-write-open"}) {
    EXPECT_EQ(r[op], "denied") << op << "\n" << log;
  }
  for (const char* missing : {"husky2/.husky/_", "vendor/lib/.githooks", "hooks2/.githooks", "hooks3/.githooks",
                              ".gitconfig-local", ".gitconfig-global",
                              ".husky/_/reference-transaction", ".husky/_/post-index-change"}) {
    EXPECT_FALSE(fs::exists(fs::symlink_status(proj_ + "/" + missing))) << missing;
  }
  // What the user's git does when it (or an IDE) looks, in every repository.
  for (const char* dir : {"", "/vendor/lib", "/cfg-include", "/cfg-missing", "/fsm", "/plain", "/husky2", "/hooks2",
                          "/hooks3"}) {
    std::string where = proj_ + dir;
    host_git(where, "status");
    host_git(where, "fetch -q '" + remote_ + "' refs/heads/main:refs/remotes/host/main");
    host_git(where, "diff");
    host_git(where, "log -1");
  }
  for (const char* c : {"husky", "swap", "githooks", "rename", "symlink", "include", "include-new", "global",
                        "fsmonitor", "fsmonitor-open", "include-open"}) {
    EXPECT_FALSE(fs::exists(home_ + "/canary." + c)) << "host git ran the guest's code planted by " << c;
  }
  // The hooks the user's git runs are still the user's.
  EXPECT_EQ(Read(proj_ + "/.husky/_/pre-commit"), "#!/bin/sh\nexit 0\n");
  EXPECT_EQ(Read(proj_ + "/husky2/.husky-old/_/pre-commit"), "#!/bin/sh\nexit 0\n");
  EXPECT_EQ(Read(proj_ + "/fsm/tools/fsmonitor.sh"), "#!/bin/sh\nexit 1\n");
  EXPECT_EQ(Read(proj_ + "/.gitconfig-team"), "[user]\n\tname = team\n");
}

INSTANTIATE_TEST_SUITE_P(Caller, QemuJailTest, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "Root" : "User"; });

// A guest-planted symlink at a protected path refuses the boot (nothing is followed).
TEST(QemuJailPrepareTest, SymlinkAtAProtectedPathIsRefused) {
  char t[] = "/var/tmp/cloister-jail-sym.XXXXXX";
  ASSERT_NE(mkdtemp(t), nullptr);
  std::string root = t;
  fs::create_directories(root + "/.git/hooks");
  Write(root + "/.git/HEAD", "ref: refs/heads/main\n");
  fs::create_symlink("/etc/passwd", root + "/.git/config");
  int fd = open(root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  JailSpec spec;
  spec.shares = {{root, fd, false}};
  auto jail = QemuJail::Prepare(spec);
  ASSERT_FALSE(jail.ok());
  EXPECT_NE(jail.error().message().find(".git/config is not a regular file"), std::string::npos)
      << jail.error().ToString();
  EXPECT_NE(jail.error().hint().find(":ro"), std::string::npos);
  close(fd);
  fs::remove(root + "/.git/config");
  fs::create_symlink("/etc", root + "/.git/info");
  fd = open(root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  spec.shares = {{root, fd, false}};
  EXPECT_FALSE(QemuJail::Prepare(spec).ok());
  close(fd);
  fs::remove(root + "/.git/info");
  fs::create_directories(root + "/.git/info");
  fs::create_symlink("/etc", root + "/.git/modules");
  fd = open(root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  spec.shares = {{root, fd, false}};
  auto modules = QemuJail::Prepare(spec);
  ASSERT_FALSE(modules.ok());
  EXPECT_NE(modules.error().message().find(".git/modules is not a directory"), std::string::npos)
      << modules.error().ToString();
  close(fd);
  fs::remove_all(root);
}

// As root the jail is what drops QEMU's uid: without an identity to drop to, it refuses.
TEST(QemuJailPrepareTest, RootWithoutAnIdentityIsRefused) {
  if (geteuid() != 0) GTEST_SKIP() << "root only";
  auto jail = QemuJail::Prepare(JailSpec{});
  ASSERT_FALSE(jail.ok());
  EXPECT_NE(jail.error().message().find("identity"), std::string::npos) << jail.error().ToString();
  JailSpec spec;
  spec.identity = {true, kQemuUid, kQemuUid, {}};
  EXPECT_TRUE(QemuJail::Prepare(spec).ok());
}

// A failed jail step never execs: the child exits 125 and says which step failed.
TEST(QemuJailPrepareTest, AFailedStepNeverExecs) {
  char t[] = "/var/tmp/cloister-jail-step.XXXXXX";
  ASSERT_NE(mkdtemp(t), nullptr);
  std::string root = t;
  SpawnOptions so;
  so.stdout_path = root + "/out";
  so.before_exec = [] { return 6; };
  so.before_exec_error = &QemuJail::StepName;
  auto pid = SpawnProcess({"touch", root + "/ran"}, so);
  ASSERT_TRUE(pid.ok());
  EXPECT_EQ(WaitChild(*pid, std::chrono::minutes(1)), std::optional<int>(125));
  EXPECT_FALSE(fs::exists(root + "/ran"));
  EXPECT_EQ(Read(root + "/out"), QemuJail::StepName(6));
  fs::remove_all(root);
}

}  // namespace
}  // namespace cloister::vm
