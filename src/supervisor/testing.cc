#include "supervisor/testing.h"

#include <fcntl.h>
#include <pty.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <vector>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "base/strings.h"
#include "image/testing.h"
#include "supervisor/launcher.h"
#include "supervisor/state.h"
#include "supervisor/workspace.h"

namespace cloister::vm::testing {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {
std::string* g_image_dir = nullptr;
}  // namespace

std::string Slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

size_t CountInFile(const std::string& path, const std::string& needle) {
  if (needle.empty()) return 0;
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    close(fd);
    return 0;
  }
  // Holes read as zeros, so a needle without a NUL cannot be in one, nor span one: only the
  // file's data extents are read (SEEK_DATA/SEEK_HOLE). A workspace's home image is a sparse
  // 64 GiB file holding a few MiB; reading its zeros took minutes per search.
  const bool skip_holes = needle.find('\0') == std::string::npos;
  const off_t end = st.st_size;
  const size_t keep = needle.size() - 1;  // a match may straddle two reads
  std::string buf;
  size_t count = 0;
  std::vector<char> chunk(4 << 20);
  off_t off = 0;
  while (off < end) {
    off_t data = off, hole = end;
    if (skip_holes) {
      data = lseek(fd, off, SEEK_DATA);
      if (data < 0 && errno == ENXIO) break;  // nothing but a hole from here on
      if (data < 0) {
        data = off;  // the filesystem cannot say: read everything
      } else {
        hole = lseek(fd, data, SEEK_HOLE);
        if (hole < 0 || hole > end) hole = end;
      }
      if (data != off) buf.clear();  // zeros in between: no match spans them
    }
    off = data;
    bool failed = false;
    while (off < hole) {
      ssize_t got = pread(fd, chunk.data(), std::min<off_t>(static_cast<off_t>(chunk.size()), hole - off), off);
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) {
        failed = true;
        break;
      }
      off += got;
      buf.append(chunk.data(), static_cast<size_t>(got));
      size_t pos = 0;
      while ((pos = buf.find(needle, pos)) != std::string::npos) {
        ++count;
        pos += needle.size();
      }
      // Keep the tail that could begin a match, but never re-count one that ended inside it.
      size_t last = buf.rfind(needle);
      size_t last_end = last == std::string::npos ? 0 : last + needle.size();
      size_t from = buf.size() > keep ? buf.size() - keep : 0;
      buf.erase(0, std::max(from, last_end));
    }
    if (failed) break;
  }
  close(fd);
  return count;
}

void CliVmTest::SetUpTestSuite() {
  if (g_image_dir != nullptr) return;
  auto img = image::testing::SharedTestImage();
  ASSERT_TRUE(img.ok()) << img.error().ToString();
  g_image_dir = new std::string(img->dir);
}

const std::string& CliVmTest::image_dir() { return *g_image_dir; }

void CliVmTest::SetUp() {
  ASSERT_NE(g_image_dir, nullptr) << "the test image could not be built";
  char t[] = "/tmp/cl-vm-XXXXXX";  // short: unix socket paths are limited to 107 bytes
  ASSERT_NE(mkdtemp(t), nullptr);
  root_ = t;
  auto s = Store::Open(root_);
  ASSERT_TRUE(s.ok()) << s.error().ToString();
  store_ = std::move(*s);
  const char* bin = std::getenv("CLOISTER_BINARY_DIR");
  ASSERT_NE(bin, nullptr) << "ctest sets CLOISTER_BINARY_DIR";
  exe_ = std::string(bin) + "/src/cli/cloister";
}

void CliVmTest::TearDown() {
  if (store_ != nullptr) {
    auto list = store_->List();
    if (list.ok()) {
      for (const auto& ws : *list) {
        StopOptions so;
        so.force = true;
        std::ostringstream quiet;
        (void)StopWorkspace(*store_, ws.name, so, quiet);
      }
    }
  }
  if (!root_.empty()) fs::remove_all(root_);
}

RunOutput CliVmTest::Cloister(std::vector<std::string> args, const std::string& input) {
  args.insert(args.begin(), {exe_, "--store", root_});
  RunOptions o;
  o.timeout = std::chrono::minutes(6);
  o.stdin_data = input;
  o.env_set = env_;
  auto r = RunProcess(args, o);
  EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error().ToString());
  if (!r.ok()) return RunOutput{};
  if (r->exit_code != 0) std::cerr << "[" << Join(args, " ") << "] -> " << r->exit_code << "\n" << r->err;
  return *r;
}

void CliVmTest::ExecCloister(std::vector<std::string> args, const std::string& cwd,
                             const std::map<std::string, std::string>& extra) {
  args.insert(args.begin(), {exe_, "--store", root_});
  if (!cwd.empty() && chdir(cwd.c_str()) != 0) _exit(126);
  for (const auto& [k, v] : env_) setenv(k.c_str(), v.c_str(), 1);
  for (const auto& [k, v] : extra) setenv(k.c_str(), v.c_str(), 1);
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  execv(exe_.c_str(), argv.data());
  _exit(127);
}

pid_t CliVmTest::SpawnCloister(std::vector<std::string> args) {
  pid_t pid = fork();
  if (pid == 0) {
    int null_fd = open("/dev/null", O_RDWR);
    dup2(null_fd, 0);
    dup2(null_fd, 1);
    dup2(null_fd, 2);
    ExecCloister(std::move(args), "", {});
  }
  return pid;
}

pid_t CliVmTest::SpawnCloisterOnPty(std::vector<std::string> args, int* master,
                                    const std::string& cwd,
                                    const std::map<std::string, std::string>& extra,
                                    unsigned short rows, unsigned short cols) {
  winsize ws{rows, cols, 0, 0};
  pid_t pid = forkpty(master, nullptr, nullptr, &ws);
  if (pid == 0) {
    setenv("TERM", "xterm", 1);
    ExecCloister(std::move(args), cwd, extra);
  }
  return pid;
}

void CliVmTest::Create(const std::string& name, const WorkspaceSpec& spec) {
  CreateRequest req;
  req.name = name;
  req.image = spec.image.empty() ? image_dir() + "/disk.raw" : spec.image;
  req.memory_mib = spec.memory_mib;
  req.cpus = spec.cpus;
  req.home_size = spec.home_size;
  req.volumes = spec.volumes;
  auto c = store_->Create(req);
  ASSERT_TRUE(c.ok()) << c.error().ToString();
}

void CliVmTest::Start(const std::string& name) {
  auto t0 = Clock::now();
  auto r = Cloister({"start", name, "--accel", "tcg"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("ready"), std::string::npos) << r.err;
  std::cerr << "[start " << name << ": "
            << std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count()
            << " ms]\n";
}

void CliVmTest::Stop(const std::string& name) {
  auto r = Cloister({"stop", name, "--timeout", "60"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(DeriveStatus(RunPathsFor(*store_, name)).state, VmState::kStopped);
}

std::string CliVmTest::Exec(const std::string& name, const std::string& script, int* code,
                            const std::string& user, const std::vector<std::string>& args) {
  std::vector<std::string> argv = {"exec", name, "-u", user, "--", "sh", "-c", script};
  argv.insert(argv.end(), args.begin(), args.end());
  auto r = Cloister(argv);
  if (code) *code = r.exit_code;
  return r.out;
}

std::map<std::string, size_t> CliVmTest::FindInWorkspaceFiles(const std::string& name,
                                                               const std::string& needle) {
  std::map<std::string, size_t> found;
  std::error_code ec;
  fs::path dir = fs::path(root_) / "workspaces" / name;
  for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    if (!it->is_regular_file(ec)) continue;
    size_t n = CountInFile(it->path().string(), needle);
    if (n > 0) found[it->path().string()] = n;
  }
  EXPECT_FALSE(ec) << "scanning " << dir << ": " << ec.message();
  return found;
}

}  // namespace cloister::vm::testing
