// Shared folders (issue 38), not a test: what QEMU's jail adds to each file operation in a share,
// measured side by side in one run with the same program doing the same operations in a folder on
// the same filesystem:
//   1. plain: the program as an ordinary process;
//   2. jailed: the program exactly as QEMU runs (vm/qemu_jail.h: its user namespace, the share
//      as its own mount, idmapped when the bench runs as root, Landlock, and the share guard of
//      vm/share_guard.h serving every create, rename and link from this process);
//   3. the syscalls 9p's security_model=mapped-xattr would add instead (4 setxattr after a create,
//      4 getxattr per stat), as a plain process: the alternative to idmapping this issue weighed.
// The folder is a git repository whose configuration names a hook directory and an include
// target in it that do not exist (as husky and a team configuration leave a project), so that the
// share guard checks every name made against what host git's configuration names (issue 38).
// Operations: create (openat O_CREAT + close), mkdir, rename, stat (fstatat), each N times,
// median of R runs; and the boot-time walk of a share (vm/share_scan.h) over a tree of D
// directories holding a few git dirs, then the reading of host git's configuration for them
// (vm/share_git_config.h).
// Usage: share_bench [--smoke] [--markdown] [N] [D] [DIR]   (--smoke: N = 200, D = 200, 3 runs;
// DIR: where the folders go, default /dev/shm: tmpfs, so that the figures show what the jail adds
// rather than the disk's noise; pass a directory on ext4 or xfs to see both)
// A failed step exits 1 with the reason on stderr.
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "base/subprocess.h"
#include "vm/process.h"
#include "vm/qemu_access.h"
#include "vm/qemu_jail.h"
#include "vm/share_git_config.h"
#include "vm/share_scan.h"
#include "report.h"

using namespace cloister;
using namespace cloister::vm;
using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

namespace {

std::string g_unavailable;  // why the jailed runs could not be made, if so

[[noreturn]] void Fail(const std::string& what) {
  std::fprintf(stderr, "share_bench: FAILED: %s\n", what.c_str());
  std::exit(1);
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// The child: N of each operation in the directory `fd`; prints "create mkdir rename stat" in
// microseconds per operation. `xattrs`: also what mapped-xattr adds.
int Child(int fd, int n, bool xattrs) {
  auto us = [n](Clock::time_point a) {
    return std::chrono::duration<double, std::micro>(Clock::now() - a).count() / n;
  };
  const char* keys[] = {"user.virtfs.uid", "user.virtfs.gid", "user.virtfs.mode", "user.virtfs.rdev"};
  char proc[64];
  auto t = Clock::now();
  for (int i = 0; i < n; ++i) {
    std::string f = "f" + std::to_string(i);
    int c = openat(fd, f.c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0644);
    if (c < 0) return 2;
    if (xattrs) {
      for (const char* k : keys) fsetxattr(c, k, "1000", 4, 0);
    }
    close(c);
  }
  double create = us(t);
  t = Clock::now();
  for (int i = 0; i < n; ++i) {
    if (mkdirat(fd, ("d" + std::to_string(i)).c_str(), 0755) != 0) return 3;
  }
  double mkdir = us(t);
  t = Clock::now();
  for (int i = 0; i < n; ++i) {
    if (renameat(fd, ("f" + std::to_string(i)).c_str(), fd, ("g" + std::to_string(i)).c_str()) != 0) return 4;
  }
  double rename = us(t);
  t = Clock::now();
  char buf[16];
  for (int i = 0; i < n; ++i) {
    struct stat st;
    std::string g = "g" + std::to_string(i);
    if (fstatat(fd, g.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) return 5;
    if (xattrs) {
      int o = openat(fd, g.c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC);
      snprintf(proc, sizeof(proc), "/proc/self/fd/%d", o);
      for (const char* k : keys) getxattr(proc, k, buf, sizeof(buf));
      close(o);
    }
  }
  double stat = us(t);
  for (int i = 0; i < n; ++i) {
    unlinkat(fd, ("g" + std::to_string(i)).c_str(), 0);
    unlinkat(fd, ("d" + std::to_string(i)).c_str(), AT_REMOVEDIR);
  }
  std::printf("%.2f %.2f %.2f %.2f\n", create, mkdir, rename, stat);
  return 0;
}

struct Figures {
  std::vector<double> create, mkdir, rename, stat;
};

void Parse(const std::string& out, Figures* f) {
  double c, m, r, s;
  if (std::sscanf(out.c_str(), "%lf %lf %lf %lf", &c, &m, &r, &s) != 4) Fail("child said: " + out);
  f->create.push_back(c);
  f->mkdir.push_back(m);
  f->rename.push_back(r);
  f->stat.push_back(s);
}

// One run of the child, plain or jailed; its output.
std::string RunChild(const std::string& self, const std::string& dir, int n, bool jailed, bool xattrs) {
  int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) Fail("open " + dir);
  std::string out = dir + ".out";
  SpawnOptions so;
  so.stdout_path = out;
  so.keep_fds = {fd};
  std::unique_ptr<QemuJail> jail;
  if (jailed) {
    JailSpec spec;
    spec.shares = {{dir, fd, false}};
    spec.extra_read_paths = {fs::path(self).parent_path().string()};
    if (geteuid() == 0) {
      auto id = QemuIdentityForId(0xfffff0, false);
      if (!id.ok()) Fail(id.error().ToString());
      spec.identity = *id;
    }
    auto made = QemuJail::Prepare(spec);
    if (!made.ok() && made.error().code() == ErrorCode::kFailedPrecondition) {
      close(fd);
      g_unavailable = made.error().message();  // this kernel cannot jail QEMU as this user
      return "";
    }
    if (!made.ok()) Fail(made.error().ToString());
    jail = std::move(*made);
    so.before_exec = [j = jail.get()] { return j->Enter(); };
    so.before_exec_error = &QemuJail::StepName;
  }
  auto pid = SpawnProcess({self, "--child", std::to_string(fd), std::to_string(n), xattrs ? "1" : "0"}, so);
  if (!pid.ok()) Fail(pid.error().ToString());
  if (jail) {
    if (auto g = jail->StartGuard(*pid); !g.ok()) Fail(g.error().ToString());
  }
  auto st = WaitChild(*pid, std::chrono::minutes(10));
  close(fd);
  std::string text;
  if (FILE* f = std::fopen(out.c_str(), "r")) {
    char buf[4096];
    size_t got = std::fread(buf, 1, sizeof(buf), f);
    text.assign(buf, got);
    std::fclose(f);
  }
  unlink(out.c_str());
  if (!st || *st != 0) Fail("child exited " + (st ? std::to_string(*st) : std::string("late")) + ": " + text);
  return text;
}

// A tree of `dirs` directories, 3 levels, 4 files each, and 4 git dirs (a top .git, a vendored
// clone, a bare fixture, a submodule's git dir).
void MakeTree(const std::string& root, int dirs) {
  for (int i = 0; i < dirs; ++i) {
    std::string d = root + "/node_modules/p" + std::to_string(i % 97) + "/m" + std::to_string(i) + "/lib";
    fs::create_directories(d);
    for (int f = 0; f < 4; ++f) std::fclose(std::fopen((d + "/f" + std::to_string(f)).c_str(), "w"));
  }
  for (const char* g : {"/.git", "/vendor/lib/.git", "/tests/fixture.git", "/.git/modules/sub"}) {
    fs::create_directories(root + g + "/objects");
    fs::create_directories(root + g + "/refs");
    fs::create_directories(root + g + "/hooks");
    std::ofstream(root + g + "/HEAD") << "ref: refs/heads/main\n";
    std::ofstream(root + g + "/config") << "[core]\n\trepositoryformatversion = 0\n\thooksPath = .husky/_\n";
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 5 && std::string(argv[1]) == "--child") {
    return Child(std::atoi(argv[2]), std::atoi(argv[3]), std::string(argv[4]) == "1");
  }
  bool smoke = bench::HasFlag(argc, argv, "--smoke");
  std::vector<std::string> pos;
  for (int i = 1; i < argc; ++i) {
    if (argv[i][0] != '-') pos.push_back(argv[i]);
  }
  int n = pos.size() > 0 ? std::atoi(pos[0].c_str()) : (smoke ? 200 : 2000);
  int dirs = pos.size() > 1 ? std::atoi(pos[1].c_str()) : (smoke ? 200 : 20000);
  int runs = smoke ? 3 : 7;
  std::string self = fs::canonical("/proc/self/exe").string();
  std::string base = pos.size() > 2 ? pos[2] : "/dev/shm";
  std::string tmpl = base + "/cloister-share-bench.XXXXXX";
  if (!mkdtemp(tmpl.data())) Fail("mkdtemp in " + base);
  std::string root = tmpl;
  std::string dir = root + "/share";
  fs::create_directories(dir);
  auto repo = RunProcess({"sh", "-c", "cd '" + dir + "' && git init -q && git config core.hooksPath .githooks && "
                          "git config include.path ../local.gitconfig"});
  if (!repo.ok() || repo->exit_code != 0) Fail("git init in " + dir);

  Figures plain, jailed, xattr;
  for (int r = 0; r < runs; ++r) {  // alternating, so drift of the machine hits all three alike
    Parse(RunChild(self, dir, n, false, false), &plain);
    std::string j = RunChild(self, dir, n, true, false);
    if (g_unavailable.empty()) Parse(j, &jailed);
    Parse(RunChild(self, dir, n, false, true), &xattr);
  }

  std::string tree = root + "/tree";
  MakeTree(tree, dirs);
  size_t tree_dirs = 0, tree_files = 0;
  for (const auto& e : fs::recursive_directory_iterator(tree)) (e.is_directory() ? tree_dirs : tree_files)++;
  std::vector<double> scans;
  size_t targets = 0;
  for (int r = 0; r < runs; ++r) {
    int fd = open(tree.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
    auto t0 = Clock::now();
    auto scan = ScanShare(tree, fd);
    scans.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    close(fd);
    if (!scan.ok()) Fail(scan.error().ToString());
    targets = scan->targets.size();
  }
  // Then what host git's configuration names in it (vm/share_git_config.h): one git run per
  // repository and per home.
  std::vector<double> configs;
  std::optional<std::string> git = FindHostGit();
  GitConfigScope scope = HostGitScope(git.value_or(""), {geteuid()});
  size_t repos = 0;
  for (int r = 0; git && r < runs; ++r) {
    int fd = open(tree.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
    auto scan = ScanShare(tree, fd);
    if (!scan.ok()) Fail(scan.error().ToString());
    repos = scan->git_dirs.size() + scan->gitfiles.size();
    auto t0 = Clock::now();
    auto config = ProtectGitConfigPaths({{tree, fd, false, &*scan}}, scope);
    configs.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    close(fd);
    if (!config.ok()) Fail(config.error().ToString());
  }
  fs::remove_all(root);

  std::string who = (geteuid() == 0 ? "root (QEMU's own uid, share idmapped)" : std::string("a user (user namespace)")) +
                    ", folders in " + base;
  std::printf("share_bench: %d ops per kind, median of %d runs, as %s (microseconds per op)\n", n, runs, who.c_str());
  std::printf("%-8s %10s %10s %10s\n", "op", "plain", "jailed", "mapped-xattr");
  const char* names[] = {"create", "mkdir", "rename", "stat"};
  std::vector<double>* cols[3][4] = {{&plain.create, &plain.mkdir, &plain.rename, &plain.stat},
                                     {&jailed.create, &jailed.mkdir, &jailed.rename, &jailed.stat},
                                     {&xattr.create, &xattr.mkdir, &xattr.rename, &xattr.stat}};
  bench::Report report("share_bench",
                       "Shared folders (issue 38): microseconds per file operation in a share, as a "
                       "plain process, jailed exactly as QEMU (user namespace, idmapped share as root, "
                       "Landlock, the share guard serving creates/renames and checking each name against "
                       "what host git's configuration names), and with the syscalls 9p's "
                       "mapped-xattr model would add; then the boot-time walk of a share.",
                       {"operation", "plain (µs)", "jailed (µs)", "mapped-xattr syscalls (µs)"});
  for (int k = 0; k < 4; ++k) {
    double p = Median(*cols[0][k]), x = Median(*cols[2][k]);
    std::string j = g_unavailable.empty() ? bench::Num("%.2f", Median(*cols[1][k])) : "n/a";
    std::printf("%-8s %10.2f %10s %10.2f\n", names[k], p, j.c_str(), x);
    report.Row({names[k], bench::Num("%.2f", p), j, bench::Num("%.2f", x)});
  }
  double scan = Median(scans);
  std::printf("walk of a share: %zu directories (%zu files), %zu mounts to make: %.1f ms\n", tree_dirs,
              tree_files, targets, scan);
  std::string config = configs.empty() ? "n/a (no git)" : bench::Num("%.1f ms", Median(configs));
  std::printf("host git's configuration for its %zu repositories and %zu homes: %s\n", repos, scope.homes.size(),
              config.c_str());
  if (!g_unavailable.empty()) report.Note("Jailed: not measured here (" + g_unavailable + ").");
  report.Note(bench::Num("%d operations of each kind per run, median of %d runs, alternating; as %s.", n, runs,
                         who.c_str()));
  report.Note(bench::Num("Boot-time walk of a share of %zu directories and %zu files with 4 git dirs "
                         "(warm cache): %.1f ms, %zu mounts to make.", tree_dirs, tree_files, scan, targets));
  report.Note(bench::Num("Reading host git's configuration for its %zu repositories and %zu home(s) (one git "
                         "run each, every include followed): ", repos, scope.homes.size()) + config + ".");
  if (bench::Report::Wanted(argc, argv)) report.Print(argc, argv);
  return 0;
}
